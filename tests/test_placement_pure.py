"""Placement specs, suites and --set validate without the compiled core; the option
table's copies of the header's enum names match the core where it is built."""
import subprocess
import sys
from pathlib import Path

import pytest

from cxlbench.errors import PlacementError
from cxlbench.placement import PAGE_SIZES, Placement

ROOT = Path(__file__).resolve().parent.parent

# Runs in a fresh interpreter where `import cxlbench._native` fails, as on a machine where
# the extension was never built.
NO_CORE = """
import sys

class Hide:
    def find_spec(self, name, path=None, target=None):
        if name == "cxlbench._native":
            raise ImportError("the compiled core is hidden")

sys.meta_path.insert(0, Hide())
from cxlbench import errors, suite

full = suite.expand(suite.load("suites/full.toml"), [0, 1, 2], [0, 1], ["0,1", "0,2"])
quick = suite.expand(suite.load("quick"), [0, 1])
try:
    suite.expand(suite.adhoc("chase", ["mem=bind:x"]), [0])
    bad = "accepted"
except errors.SuiteError as e:
    bad = str(e)
(case,) = suite.expand(suite.adhoc("bandwidth", ["kernel=copy", "mem=weighted:0=3,1=1"]), [0])
# bandwidth's buffer names are the kernel table's: unchecked here, checked where it runs;
# chase names its buffer in Python, so a wrong one is refused even here.
(split,) = suite.expand(suite.adhoc("bandwidth", ["kernel=copy", "mem.src=bind:1"]), [0, 1])
try:
    suite.expand(suite.adhoc("chase", ["mem.table=bind:0"]), [0])
    nobuf = "accepted"
except errors.SuiteError as e:
    nobuf = str(e)
print(len(full), len(quick), case.params["mem"], split.params["mem.src"])
print(bad)
print(nobuf)
print("cxlbench._native" in sys.modules, "cxlbench.native" in sys.modules)
"""


def test_suites_and_set_validate_without_the_core():
    r = subprocess.run([sys.executable, "-c", NO_CORE], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    counts, bad, nobuf, loaded = r.stdout.splitlines()
    from cxlbench import suite      # the same suites with the core, where it is built
    full = suite.expand(suite.load(str(ROOT / "suites/full.toml")), [0, 1, 2], [0, 1],
                        ["0,1", "0,2"])
    quick = suite.expand(suite.load("quick"), [0, 1])
    assert counts == f"{len(full)} {len(quick)} weighted:0=3,1=1 bind:1"
    assert "option 'mem': malformed placement 'bind:x'" in bad
    assert "chase has no buffer 'table' (its buffers: chain" in nobuf
    assert loaded == "False False"


def test_placement_is_a_value():
    p = Placement.parse(" interleave:0-2 ")
    assert (p.policy, p.nodes, str(p)) == ("interleave", (0, 1, 2), "interleave:0-2")
    assert Placement.parse(str(p)) == p
    assert str(Placement.parse("weighted:0=3,2-3=1")) == "weighted:0=3,2=1,3=1"
    for bad in ("bind", "bind:", "preferred:0,1", "weighted:0=0", "spread:0"):
        with pytest.raises(PlacementError, match="malformed placement"):
            Placement.parse(bad)
    from cxlbench import memory
    assert memory.Placement is Placement and memory.PAGE_SIZES is PAGE_SIZES


def test_option_names_match_the_core():
    """The option table names the header's enums without the core; the core's values
    stay authoritative (native maps each name to its C value)."""
    native = pytest.importorskip("cxlbench.native")
    from cxlbench.benchmarks import bandwidth, coherence, flush, loaded_latency
    assert loaded_latency.MIXES == native.LOAD_MODES
    assert coherence.PINGPONG_MODES == native.PINGPONG_MODES
    assert coherence.ATOMIC_MODES == native.ATOMIC_MODES
    assert flush.KINDS == native.FLUSH_KINDS
    kernels = bandwidth.OPTIONS["kernel"].allowed()
    assert kernels == tuple(k.key for k in native.kernels() if k.benchmark == "bandwidth")
    assert "copy_libc" in kernels
    with pytest.raises(ValueError, match="is not one of"):
        bandwidth.OPTIONS["kernel"].convert("copy_nope")


def test_placement_options_hold_values_and_json_holds_their_text():
    """Option.convert makes a Placement (and passes one through, as a resume converts
    run.json's values again); to_json gives back the canonical text, from_json the value."""
    import json
    from cxlbench import benchmarks, suite
    from cxlbench.options import COMMON, from_json, to_json
    opt = COMMON["mem"]
    p = opt.convert(" weighted:0=3,2-3=1")
    assert isinstance(p, Placement) and opt.convert(p) is p and opt.convert(str(p)) == p
    assert hash(opt.convert(str(p))) == hash(p)
    assert opt.default == Placement("local") and Placement.bind(2) == Placement.parse("bind:2")
    params = {"mem": p, "mem.src": Placement.bind(1), "size": 4096, "cpus": "0-3"}
    text = to_json(params)
    assert text == {"mem": "weighted:0=3,2=1,3=1", "mem.src": "bind:1", "size": 4096,
                    "cpus": "0-3"}
    assert json.loads(json.dumps(text)) == text
    assert from_json(benchmarks.get("bandwidth"), text) == params
    (case,) = suite.expand(suite.adhoc("bandwidth", ["kernel=copy", "mem.src=bind:1"]), [0, 1])
    assert suite.Case.from_dict(json.loads(json.dumps(case.to_dict()))) == case
