"""How far the calibrated model was from measurement on this machine, per benchmark: from
the newest runs under the results folder whose cases recorded the model's prediction
beside their measurement (suites/model-check.toml's, the ml suite's, plan --check's). A
figure printed from the model carries the error of the same model on the nearest checked
cases of its workload, and past UNTRUSTED is withheld, saying why."""
from __future__ import annotations

import pathlib
import statistics
from dataclasses import dataclass

from .. import results
from ..errors import CxlbenchError

UNTRUSTED = 0.30        # a median |error| past this: the model's figure is not printed
SCAN = 20               # the newest runs looked into (a results folder may hold thousands)


@dataclass(frozen=True)
class Checked:
    benchmark: str
    error: float        # median |predicted / measured - 1| over the cases
    cases: int
    run: str            # the run they came from

    @property
    def trusted(self) -> bool:
        return self.error <= UNTRUSTED

    def words(self) -> str:
        return (f"the model was {self.error:.0%} off (median) this machine's {self.cases} "
                f"measured {self.benchmark} case{'s' if self.cases > 1 else ''} ({self.run})")

    def untrusted(self) -> str:
        return f"not trustworthy here: {self.words()}, past {UNTRUSTED:.0%}"


def errors(results_dir: str | pathlib.Path, machine: str | None = None) -> dict[str, Checked]:
    """Each benchmark's model error from the newest run (of the SCAN newest of this
    machine's) that checked it; a run that cannot be read is passed over."""
    found: dict[str, Checked] = {}
    folder = pathlib.Path(results_dir) / (machine or results.machine_id())
    for meta in sorted(folder.glob("*/run.json"), reverse=True)[:SCAN]:
        try:
            done = results.Run.open(meta.parent).finished()
        except CxlbenchError:
            continue
        errs: dict[str, list[float]] = {}
        for entry in done.values():
            model = (entry.get("info") or {}).get("model") or {}
            measured = ((entry.get("summary") or {}).get(model.get("metric")) or {}).get("median")
            if entry.get("status") == "ok" and measured and model.get("predicted"):
                errs.setdefault(str(entry.get("bench")), []).append(
                    abs(model["predicted"] / measured - 1))
        for bench, e in errs.items():
            found.setdefault(bench, Checked(bench, statistics.median(e), len(e),
                                            str(meta.parent)))
    return found
