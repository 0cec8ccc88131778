"""A module imported at its first use rather than with its importer: pandas, which the
modules a case's process imports name, but no case needs to start (a quarter of a second
of every run's worker server on the development VM, seconds under TCG)."""
from __future__ import annotations

import importlib


class AtFirstUse:
    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr):
        return getattr(importlib.import_module(self._name), attr)
