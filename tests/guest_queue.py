"""One guest boot for several tests: `cxlbench emulate` runs a queue of commands in place
of its one cxlbench command, each in a folder of its own under the working folder (which
the guest shares), its stdout, stderr and exit code kept there for the test that asked.
A boot under TCG costs about a minute before any work; the cxl guest's tests share one.

A command may run as a fresh guest of `limit` seconds would: its guest's time left (the
emulate marker's limit less the guest's uptime, which `cxlbench run` fits its cases to)
counts from the queue's start, as if the commands before it had not run.

Run on the host as `python guest_queue.py host QUEUE EMULATE-ARGS...` (it swaps the
guest's cxlbench command for this file's guest side), and by the guest as
`python guest_queue.py guest QUEUE`; the guest side needs nothing but the standard
library. Tests call run()."""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
REPO = HERE.parent.parent


def run(cwd: Path, entries: list[dict], emulate_args: list[str], timeout: float) -> dict:
    """Boot one guest (`cxlbench emulate EMULATE_ARGS`) that runs each entry in turn:
    {"name", and "args" (cxlbench's arguments) or "script" (a Python file), optional
    "limit" (seconds, above)}. Each runs in cwd/<name>, which holds suites/ as a checkout
    does. Returns each entry by its name: {"rc" (None where it never ended), "stdout",
    "stderr", "folder", "command", "started", "boot" (emulate's finished process)}. Each
    test checks its own entry, so one that hangs the guest fails the others with why."""
    queue = []
    for e in entries:
        folder = cwd / e["name"]
        suites_in(folder)
        queue.append({"name": e["name"], "folder": str(folder), "limit": e.get("limit"),
                      "args": e.get("args"), "script": str(e["script"]) if e.get("script")
                      else None})
    path = cwd / "queue.json"
    path.write_text(json.dumps(queue, indent=1))
    boot = subprocess.run([sys.executable, str(HERE), "host", str(path), *emulate_args],
                          cwd=cwd, capture_output=True, text=True, timeout=timeout)
    out = {}
    for q in json.loads(path.read_text()):
        folder = Path(q["folder"])
        rc = folder / "rc"
        out[q["name"]] = {
            "rc": int(rc.read_text()) if rc.exists() else None, "folder": folder,
            # (no command where the host side failed before writing it)
            "command": q.get("command") or q["args"] or q["script"],
            "started": (folder / "stderr").exists(), "boot": boot,
            **{k: (folder / k).read_text(errors="replace") if (folder / k).exists() else ""
               for k in ("stdout", "stderr")}}
    return out


def suites_in(folder: Path) -> None:
    """The folder made, holding suites/ci.toml and ci-full.toml as a checkout does."""
    (folder / "suites").mkdir(parents=True, exist_ok=True)
    for name in ("ci.toml", "ci-full.toml"):
        (folder / "suites" / name).write_bytes((REPO / "suites" / name).read_bytes())


def said(entry: dict) -> str:
    """What a failed entry's assertion should show: its command and its stderr's tail;
    where it never ended, whether it started, and the boot's own end (emulate's error,
    the folder it kept the guest's logs in)."""
    if entry["rc"] is not None:
        return f"{entry['command']} exited {entry['rc']}: {entry['stderr'][-3000:]}"
    how = "started in the guest but never ended" if entry["started"] else \
        "never ran in the guest"
    return (f"{how}: {entry['command']}; its stderr: {entry['stderr'][-2000:]}; the guest "
            f"(exit {entry['boot'].returncode}): {entry['boot'].stderr[-2000:]}")


def _host(path: str, emulate_args: list[str]) -> int:
    """The host's side: each entry's guest command line written into the queue, and
    `cxlbench emulate` run with its guest command swapped for this file's guest side."""
    from cxlbench import emulate
    from cxlbench.cli import main
    real = emulate.guest_python
    queue = json.loads(Path(path).read_text())
    for q in queue:
        q["command"] = (f"{real('cxlbench')} {shlex.join(q['args'])}" if q["args"] else
                        f"{shlex.quote(sys.executable)} {shlex.quote(q['script'])}")
    Path(path).write_text(json.dumps(queue, indent=1))
    side = f"{shlex.quote(sys.executable)} {shlex.quote(str(HERE))} guest {shlex.quote(path)}"
    emulate.guest_python = lambda module: side if module == "cxlbench" else real(module)
    main(["emulate", *emulate_args, "--", "queue"], prog_name="cxlbench")   # exits
    return 0


def _uptime() -> float:
    return float(Path("/proc/uptime").read_text().split()[0])


def _guest(path: str) -> int:
    """The guest's side: each entry in turn, a line on stderr (relayed to the host) as
    each ends."""
    start = _uptime()
    for q in json.loads(Path(path).read_text()):
        env = dict(os.environ)
        if q["limit"] and "CXLBENCH_EMULATED" in env:
            marker = json.loads(env["CXLBENCH_EMULATED"])
            marker["timeout"] = q["limit"] + (_uptime() - start)
            env["CXLBENCH_EMULATED"] = json.dumps(marker)
        folder = Path(q["folder"])
        t0 = time.monotonic()
        with open(folder / "stdout", "wb") as out, open(folder / "stderr", "wb") as err:
            rc = subprocess.run(q["command"], shell=True, cwd=folder, env=env, stdout=out,
                                stderr=err).returncode
        (folder / "rc").write_text(f"{rc}\n")
        print(f"queue: {q['name']} exited {rc} after {time.monotonic() - t0:.0f} s",
              file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    side, queue_path, *rest = sys.argv[1:]
    sys.exit(_host(queue_path, rest) if side == "host" else _guest(queue_path))
