"""ML workloads, one module each: its option table, layout, access streams, checks, and,
where the tiering engines can drive it, its `Epochs` (see epochs.py). The benchmark modules
and the tiering engines both run them; nothing here imports either.

TIERED: every workload with Epochs, by name, found by importing the package's modules, so
a new workload is its own module and nothing else lists it."""
from __future__ import annotations

import importlib
import pkgutil


def _tiered() -> dict:
    found = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        if hasattr(module, "Epochs"):
            found[module.NAME] = module.Epochs
    return found


TIERED = _tiered()
