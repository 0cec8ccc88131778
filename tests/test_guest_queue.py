"""The guest side of tests/guest_queue.py, run here as the guest runs it: each entry in its
folder in turn, its output and exit code kept there, a limit given as a fresh guest's."""
import json
import subprocess
import sys
from types import SimpleNamespace

from . import guest_queue


def test_each_entry_runs_in_its_folder_and_keeps_its_output_and_exit(tmp_path):
    marker = {"topology": "cxl", "timeout": 2400}
    show = f"{sys.executable} -c 'import os; print(os.environ[\"CXLBENCH_EMULATED\"])'"
    queue = []
    for name, command, limit in (("fails", "echo out; echo err >&2; sleep 1; exit 3", None),
                                 ("limited", show, 900), ("plain", show, None)):
        (tmp_path / name).mkdir()
        queue.append({"name": name, "folder": str(tmp_path / name), "command": command,
                      "limit": limit})
    (tmp_path / "queue.json").write_text(json.dumps(queue))
    r = subprocess.run([sys.executable, guest_queue.__file__, "guest",
                        str(tmp_path / "queue.json")], capture_output=True, text=True,
                       env={"CXLBENCH_EMULATED": json.dumps(marker), "PATH": "/usr/bin:/bin"},
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert [line.split(" exited ")[0] for line in r.stderr.splitlines()] == [
        "queue: fails", "queue: limited", "queue: plain"]
    fails = tmp_path / "fails"
    assert [(fails / f).read_text() for f in ("stdout", "stderr", "rc")] == \
        ["out\n", "err\n", "3\n"]
    # 900 s from the queue's start: the second the entry before it took is added back
    limited = json.loads((tmp_path / "limited" / "stdout").read_text())
    assert 901 <= limited["timeout"] < 906 and limited["topology"] == "cxl"
    assert json.loads((tmp_path / "plain" / "stdout").read_text()) == marker


def test_an_entry_that_never_ended_says_whether_it_started_and_how_the_guest_ended():
    boot = SimpleNamespace(returncode=1, stderr="error: the guest did not finish within 2400 s")
    entry = {"rc": None, "command": "cxlbench run ci-full", "stderr": "[ 3/34] matrix ...",
             "started": True, "boot": boot}
    said = guest_queue.said(entry)
    assert said.startswith("started in the guest but never ended: cxlbench run ci-full")
    assert "[ 3/34] matrix" in said and "did not finish within 2400 s" in said
    assert guest_queue.said({**entry, "started": False, "stderr": ""}).startswith(
        "never ran in the guest")
    assert guest_queue.said({**entry, "rc": 2, "stderr": "error: no suite"}) == \
        "cxlbench run ci-full exited 2: error: no suite"
