"""The package's layers: which part of cxlbench may import which. Every import in
cxlbench/ (at the top of a module or inside a function) goes to a layer below its own, or
stays within its own package or module; an import inside a function is one of the few
listed here, each loaded late for a reason that is not a cycle. README's Layout section
draws the same map."""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO

PACKAGE = REPO / "cxlbench"

# Lowest first. A module belongs to the layer of the longest prefix that names it; the
# package's own __init__ ("cxlbench") names only itself.
LAYERS = [
    ("base", ["cxlbench", "cxlbench.errors", "cxlbench.units", "cxlbench.lifetime",
              "cxlbench.columnar", "cxlbench.gpu_build", "cxlbench.atfirstuse",
              "cxlbench.schemas"]),
    ("own files", ["cxlbench.ownfiles"]),
    ("values and files", ["cxlbench.placement", "cxlbench.results", "cxlbench.stats",
                          "cxlbench.paramtext", "cxlbench.fleet.slurm"]),
    ("compiled boundaries and options", ["cxlbench.native", "cxlbench._native",
                                         "cxlbench.gpu", "cxlbench.options"]),
    ("the machine", ["cxlbench.topology", "cxlbench.pcie_link", "cxlbench.tuning"]),
    ("placed memory", ["cxlbench.memory", "cxlbench.system", "cxlbench.shared_region"]),
    ("workloads", ["cxlbench.workloads"]),
    ("tiering engines and policies", ["cxlbench.tiering"]),
    ("planning", ["cxlbench.plan"]),
    ("benchmarks", ["cxlbench.benchmarks"]),
    ("suites and analysis", ["cxlbench.suite", "cxlbench.analysis"]),
    ("running", ["cxlbench.runner", "cxlbench.worker", "cxlbench.analysis_text",
                 "cxlbench.estimate", "cxlbench.headline", "cxlbench.listing"]),
    ("reports and guests", ["cxlbench.report", "cxlbench.emulate"]),
    ("pre-flight", ["cxlbench.doctor"]),
    ("fleets", ["cxlbench.fleet"]),
    ("the command line", ["cxlbench.cli"]),
    ("entry points", ["cxlbench.__main__", "cxlbench.pytest_plugin"]),
]

# Imports inside functions, and why each waits.
LATE = {
    ("cxlbench.memory", "cxlbench.native"): "options and suites load where the compiled core "
                                            "is not built",
    ("cxlbench.cli", "cxlbench.native"): "a subcommand loads what it needs: `cxlbench` "
                                         "starts fast",
    ("cxlbench.cli", "cxlbench.report"): "matplotlib and the report only for report",
    ("cxlbench.cli", "cxlbench.emulate"): "the guest image only for emulate",
    ("cxlbench.cli", "cxlbench.fleet"): "SLURM's side only for fleet",
    ("cxlbench.cli", "cxlbench.doctor"): "emulate's tool tables only for doctor",
    ("cxlbench.cli", "cxlbench.plan"): "the planner's presets only for plan",
    ("cxlbench.pytest_plugin", "cxlbench"): "pytest loads the plugin in every session; "
                                            "cxlbench only where a fixture is used",
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def layer_of(module: str) -> int:
    best = None
    for i, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if module == prefix or (prefix != "cxlbench" and module.startswith(prefix + ".")):
                if best is None or len(prefix) > len(best[1]):
                    best = (i, prefix)
    assert best is not None, f"{module} is in no layer: add it to LAYERS (and README)"
    return best[0]


def room(module: str) -> str:
    """The package or top-level module a module is part of."""
    return ".".join(module.split(".")[:2])


def imports(module: str, path: Path):
    """(target module, line, inside a function) of each cxlbench import in the file."""
    tree = ast.parse(path.read_text())
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    late = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef,
                                                             ast.AsyncFunctionDef))
            for n in ast.walk(f) if isinstance(n, (ast.Import, ast.ImportFrom))}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base
                       for a in node.names]
        else:
            continue
        for target in targets:
            while target not in MODULES and "." in target:
                target = target.rpartition(".")[0]
            if target in MODULES and target != module:
                yield target, node.lineno, id(node) in late


ARROWS = [(m, *arrow) for m, p in MODULES.items() for arrow in imports(m, p)]


def test_every_module_has_a_layer():
    for module in MODULES:
        layer_of(module)


def test_no_import_goes_up_or_across_a_layer():
    bad = [f"{m}:{line} imports {t} ({LAYERS[layer_of(t)][0]} is not below "
           f"{LAYERS[layer_of(m)][0]})"
           for m, t, line, _ in ARROWS
           if layer_of(t) > layer_of(m) or (layer_of(t) == layer_of(m)
                                            and room(t) != room(m) and t != "cxlbench")]
    assert not bad, "\n".join(bad)


def test_imports_inside_functions_are_the_listed_late_ones():
    def listed(m, t):
        return any(m == a and (t == b or t.startswith(b + ".")) for a, b in LATE)
    bad = [f"{m}:{line} imports {t} inside a function"
           for m, t, line, inside in ARROWS if inside and not listed(m, t)]
    assert not bad, "\n".join(bad)


def test_the_check_sees_an_upward_arrow(tmp_path):
    """The walk finds imports at all depths, so an upward one cannot hide in a function;
    a module of no layer is named."""
    inside = [(m, t) for m, t, _, late in ARROWS if late]
    assert ("cxlbench.memory", "cxlbench.native") in inside
    planted = tmp_path / "lookups.py"
    planted.write_text("import numpy\n\ndef f():\n    from ..benchmarks import common\n"
                       "    from .. import report\n")
    found = list(imports("cxlbench.workloads.lookups", planted))
    assert ("cxlbench.benchmarks.common", 4, True) in found
    assert ("cxlbench.report", 5, True) in found
    assert all(layer_of(t) > layer_of("cxlbench.workloads.lookups") for t, _, _ in found)
    with pytest.raises(AssertionError, match="in no layer"):
        layer_of("cxlbench.newcomer")
    assert layer_of("cxlbench.workloads.embedding") < layer_of("cxlbench.benchmarks.embedding")
    assert layer_of("cxlbench.fleet.slurm") < layer_of("cxlbench.runner") < \
        layer_of("cxlbench.fleet.submit")


@pytest.mark.parametrize("module", ["cxlbench.cli", "cxlbench.worker"])
def test_no_command_and_no_case_pays_for_pandas_at_its_start(module):
    """pandas is imported at its first use (cxlbench/atfirstuse.py): every `cxlbench`
    command and the worker server each case is forked from start without it (a quarter
    of a second each on the development VM, seconds under TCG)."""
    code = f"import sys, {module}; print('pandas' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=REPO, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "False", r.stdout + r.stderr
