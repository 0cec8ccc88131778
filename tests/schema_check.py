"""Every `--json` output a test produces, held to its published schema
(cxlbench/schemas/): check_json_output(args, stdout) after a command that succeeded."""
import json
import re

import jsonschema

from cxlbench import schemas

# The command word(s) -> the schema of what `--json` prints.
SCHEMA_OF = {("run",): "run-summary", ("tiering",): "run-summary",
             ("topology",): "topology", ("list",): "list", ("doctor",): "doctor",
             ("compare",): "compare", ("report",): "report", ("plan",): "plan",
             ("fleet", "status"): "fleet-status"}
HOST = re.compile(r"^== host \d+ ==\n", re.M)      # emulate's two guests, each's output


def check_json_output(args, stdout: str) -> None:
    """Validate json.loads(stdout) against the schema of the command `args` (the CLI's
    arguments, without the program) names, where it has `--json` and a schema; return
    silently otherwise. jsonschema.ValidationError (or a JSON error) where it fails."""
    args = [str(a) for a in args]
    if "--json" not in args or "--dry-run" in args:
        return                          # a dry run lists cases as text, --json or not
    if args[:1] == ["emulate"]:
        if "--" not in args:
            return
        inner = args[args.index("--") + 1:]
        parts = HOST.split(stdout)
        for part in (parts[1:] if len(parts) > 1 else parts):   # shared-cxl: per host
            check_json_output(inner, part)
        return
    words = [a for a in args if not a.startswith("-")][:2]
    name = SCHEMA_OF.get(tuple(words)) or SCHEMA_OF.get(tuple(words[:1]))
    if name is None:
        return
    try:
        schemas.validate(name, json.loads(stdout))
    except jsonschema.ValidationError as e:
        e.message = f"cxlbench {' '.join(args)}: {e.message}"   # which command printed it
        raise
