"""The text a reader copies commands from: README.md and every page of the manual in
docs/. Tests that run what the documentation shows read it here, so a command moved from
one page to another stays tested."""
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def text() -> str:
    return "\n\n".join(p.read_text() for p in PAGES if "_build" not in p.parts)


def page(name: str) -> str:
    """One page of the manual, by its path under docs/ ("fleets.md")."""
    return (REPO / "docs" / name).read_text()
