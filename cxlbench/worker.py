"""One case in its own process: `python -m cxlbench.worker` reads the case as JSON on
stdin (Case.to_dict's form; its params become values here, each placement parsed once)
and writes the Measurement as JSON on stdout. A crash or an OOM kill takes only
this process down; the runner records the case as failed and goes on."""
from __future__ import annotations

import json
import sys

from .lifetime import die_with_parent

die_with_parent()                       # before the heavy imports below

from . import benchmarks  # noqa: E402
from .errors import CxlbenchError  # noqa: E402
from .suite import Case  # noqa: E402


def main() -> int:
    data = json.load(sys.stdin)
    try:
        case = Case.from_dict(data)
        result = benchmarks.get(case.bench).run(case.params).to_dict()
    except CxlbenchError as e:
        result = {"status": "failed", "error": f"{type(e).__name__}: {e}"}
    json.dump(result, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
