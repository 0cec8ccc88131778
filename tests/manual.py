"""The text a reader copies commands from: README.md and every page of the manual in
docs/. Tests that run what the documentation shows read it here, so a command moved from
one page to another stays tested."""
import re

from .conftest import REPO

PAGES = [REPO / "README.md",
         *sorted(p for p in (REPO / "docs").rglob("*.md") if "_build" not in p.parts)]


def text() -> str:
    return "\n\n".join(p.read_text() for p in PAGES)


def page(name: str) -> str:
    """One page of the manual, by its path under docs/ ("fleets.md")."""
    return (REPO / "docs" / name).read_text()


def code_lines() -> list[str]:
    """Every line of every code block of README and the manual, as a reader would type
    it: continuations joined, a `$ ` prompt and the comment cut."""
    out = []
    for block in re.findall(r"```[^\n]*\n(.*?)```", text(), re.S):
        for line in block.replace("\\\n", " ").splitlines():
            out.append(re.sub(r"^\$ ", "", re.split(r"\s+#", line.strip())[0].strip()))
    return out
