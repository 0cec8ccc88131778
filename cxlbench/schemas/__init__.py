"""The results format and the --json outputs, specified as JSON Schemas (draft 2020-12):
<name>.schema.json beside this file (run, case, results-row; run-summary, topology, list,
doctor, compare, report, fleet-status, plan). jsonschema is needed only to validate (tests,
docs), never by cxlbench's commands."""
from __future__ import annotations

import json
from pathlib import Path

SCHEMAS = Path(__file__).parent


def names() -> list[str]:
    """Every schema's name, sorted."""
    return sorted(p.name.removesuffix(".schema.json") for p in SCHEMAS.glob("*.schema.json"))


def load(name: str) -> dict:
    """The schema <name>.schema.json as a dict."""
    return json.loads((SCHEMAS / f"{name}.schema.json").read_text(encoding="utf-8"))


def validate(name: str, instance) -> None:
    """instance against schema `name`; jsonschema.ValidationError naming the schema and
    where in the instance it fails (the most relevant of its errors)."""
    import jsonschema
    from jsonschema.exceptions import best_match

    validator = jsonschema.Draft202012Validator(load(name))
    error = best_match(validator.iter_errors(instance))
    if error is not None:
        where = "".join(f"[{p!r}]" for p in error.absolute_path) or "the top level"
        error.message = f"{name}.schema.json: at {where}: {error.message}"
        raise error
