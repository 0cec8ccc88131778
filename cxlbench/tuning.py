"""Settings chosen by measurement on this machine. Where the fastest way to run a kernel
differs from CPU to CPU (a copy's software prefetch and page walk, a snapshot's store
kind, an embedding bag's prefetch distance), a short probe picks it at first use: every
candidate timed in turn, for a few rounds so a shared machine's drift hits each, the best
median kept. The choice is kept in the cache, keyed by this CPU and what was probed, so
later cases reuse it; every choice says whether it was probed now or kept, and the
figures it was chosen by."""
from __future__ import annotations

import json
import math
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from . import ownfiles, results
from .errors import ResultsError, StorageError

ROUNDS = 3
TIE = 0.03              # within 3 % of the fastest the first listed (the plainest) wins:
                        # a probe's medians move by about that much on a shared host
KEEP_DAYS = 7           # a kernel or firmware update changes the answer: probe weekly
CACHE_LIMIT = 4 << 20   # the cache is tens of kB: more is not ours
CPUINFO = Path("/proc/cpuinfo")


def label(settings: dict) -> str:
    """A candidate as a user sets it: 'prefetch=4 walk=1'."""
    return " ".join(f"{k}={v}" for k, v in settings.items())


def cpu_identity(cpuinfo: Path = CPUINFO) -> str:
    """The CPU a choice was made on: vendor, model name, family, model and stepping (a
    virtual machine's model name alone may say only 'AMD EPYC')."""
    fields = {}
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return "unknown CPU"
    for line in text.split("\n\n")[0].splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    name = fields.get("model name") or fields.get("Model") or "unknown CPU"
    ids = [f"{k} {fields[k]}" for k in ("cpu family", "model", "stepping") if k in fields]
    vendor = fields.get("vendor_id")
    return " ".join(filter(None, [vendor, name])) + (f" ({', '.join(ids)})" if ids else "")


@dataclass(frozen=True)
class Choice:
    settings: dict                  # the fastest candidate
    figures: dict[str, float]       # each candidate's label -> its median rate
    unit: str
    when: float                     # time.time() of the probe
    kept: bool                      # read from the cache, not probed now
    note: str = ""                  # why a kept entry was not used, where one was there

    def record(self) -> dict:
        """What a case's info keeps of it."""
        stamp = time.strftime("%Y-%m-%d %H:%M", time.localtime(self.when))
        source = (f"kept from a probe of {stamp} on this CPU" if self.kept else
                  f"probed now{f' ({self.note})' if self.note else ''}")
        return {"chosen": label(self.settings), "source": source, "unit": self.unit,
                "by": {k: round(v, 3) for k, v in self.figures.items()}}


def _cache_file() -> Path:
    return ownfiles.cache_root() / f"tuning-{results.machine_id()}.json"


def _read_cache(path: Path) -> tuple[dict, str]:
    """The cache's entries, and why the file was not read where it could not be."""
    try:
        data = json.loads(ownfiles.read_ours(path, CACHE_LIMIT))
    except FileNotFoundError:
        return {}, ""
    except (OSError, ValueError) as e:
        return {}, f"the tuning cache {path} was unreadable ({e})"
    entries = data.get("entries") if isinstance(data, dict) else None
    if not isinstance(entries, dict):
        return {}, f"the tuning cache {path} is not in cxlbench's shape"
    return entries, ""


def _kept(entry, candidates: list[dict], now: float) -> Choice | None:
    """An entry as choose() wrote it, young enough, chosen among every one of these
    candidates (and maybe more); else None. A probe of fewer (one setting fixed by the
    user) cannot speak for the rest: its winner, kept for prefetch=auto, once ran an
    embedding case at 64 M lookups/s where the full probe's choice ran 98."""
    try:
        settings, figures, when = entry["settings"], entry["figures"], float(entry["when"])
        ok = (settings in candidates and {label(c) for c in candidates} <= set(figures) and
              now - KEEP_DAYS * 86400 <= when <= now + 60 and
              all(isinstance(k, str) and isinstance(v, (int, float)) and math.isfinite(v)
                  and v > 0 for k, v in figures.items()))
        return Choice(settings, figures, str(entry["unit"]), when, kept=True) if ok else None
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def size_class(nbytes: int) -> int:
    """The power of two at or above nbytes: probes of sizes alike share a choice."""
    return 1 << (max(nbytes, 1) - 1).bit_length()


def placed(buffers) -> list[str]:
    """Where a case's buffers are, for a probe's key: 'dst=bind:0 thp'."""
    return [f"{b.name}={b.placement} {b.page}" for b in buffers]


def choose(what: str, key: dict, candidates: list[dict], rate: Callable[[dict], float],
           unit: str) -> Choice:
    """The candidate whose `rate(settings)` (higher is better) has the best median over
    ROUNDS rounds, each round timing every candidate once; within TIE of the best, the
    first listed (list the plainest first, so noise does not pick a needless one). Kept
    in the cache under `what`, `key` and this CPU; a kept choice that is among the
    candidates is reused."""
    if len(candidates) == 1:
        return Choice(candidates[0], {}, unit, time.time(), kept=False,
                      note="the only candidate")
    name = json.dumps({"what": what, "cpu": cpu_identity(), **key}, sort_keys=True,
                      default=str)
    path = _cache_file()
    entries, note = _read_cache(path)
    now = time.time()
    kept = _kept(entries.get(name), candidates, now)
    if kept is not None:
        return kept
    figures = {label(c): [] for c in candidates}
    for _ in range(ROUNDS):
        for c in candidates:
            figures[label(c)].append(rate(c))
    medians = {k: statistics.median(v) for k, v in figures.items()}
    top = max(medians.values())
    best = next(c for c in candidates if medians[label(c)] >= top * (1 - TIE))
    choice = Choice(best, medians, unit, time.time(), kept=False, note=note)
    # Entries past their week are dropped as this one is written: the file stays small.
    entries = {k: v for k, v in entries.items()
               if isinstance(v, dict) and isinstance(v.get("when"), (int, float))
               and v["when"] >= now - KEEP_DAYS * 86400}
    entries[name] = {"settings": best, "figures": medians, "unit": unit, "when": choice.when}
    text = json.dumps({"entries": entries}, indent=1, sort_keys=True)
    try:    # a cache that cannot be written only means probing again next time
        ownfiles.write_atomic(ownfiles.cache_folder() / path.name, text, shared=True)
    except (OSError, StorageError, ResultsError):
        pass
    return choice
