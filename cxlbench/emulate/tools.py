"""System tools found where distributions install them. A user's PATH (and a CI runner's)
often lacks the sbin folders, where Debian puts kmod's depmod and modprobe, so PATH
alone would call an installed tool missing. What is found is run by its full path."""
from __future__ import annotations

import os
import shutil

# Looked in after PATH, in the order a root's PATH has them.
SBIN = ("/usr/local/sbin", "/usr/sbin", "/sbin")


def find(tool: str, path: str | None = None) -> str | None:
    """The full path of the command `tool`: on `path` (default $PATH), else in SBIN; None
    where neither has it. shutil.which's signature, so it stands in for it."""
    found = shutil.which(tool, path=path) or shutil.which(tool, path=os.pathsep.join(SBIN))
    # A relative PATH entry (".") gives a relative path, which a cd would break.
    return os.path.abspath(found) if found else None


def command(tool: str) -> str:
    """What to run for `tool`: its full path where found, else its name (so that running
    it fails as it would have; callers check `missing` first)."""
    return find(tool) or tool


def missing(names: dict[str, str], path: str | None = None) -> list[str]:
    """'TOOL, TOOL (apt-get install PACKAGE)' for each package (names: tool -> package)
    with a tool not found on `path` (default $PATH) nor in SBIN."""
    absent: dict[str, list[str]] = {}
    for tool, package in names.items():
        if find(tool, path=path) is None:
            absent.setdefault(package, []).append(tool)
    return [f"{', '.join(tools)} (apt-get install {package})"
            for package, tools in absent.items()]


def folders(found: dict[str, str]) -> str:
    """{tool: full path} as 'A, B in /usr/bin; C in /usr/sbin': the folders named, each
    once, in the order first met."""
    where: dict[str, list[str]] = {}
    for tool, full in found.items():
        where.setdefault(os.path.dirname(full), []).append(tool)
    return "; ".join(f"{', '.join(tools)} in {folder}" for folder, tools in where.items())
