"""Exceptions. UserError and its children mean bad input: the CLI exits 2 on them."""


class CxlbenchError(Exception):
    """Anything cxlbench reports on purpose."""


class UserError(CxlbenchError):
    """Bad input: a spec, an option, a suite, a size the machine cannot give."""


class PlacementError(UserError):
    """A placement that cannot be made, or that the kernel did not honour."""


class SuiteError(UserError):
    """A suite file, job or option that is wrong."""


class ResultsError(UserError):
    """A results directory that cannot be read (missing, damaged, or too new)."""


class StorageError(CxlbenchError):
    """A run's files could not be written (a full disk, a folder gone read-only): the run
    stops with every finished case saved, resumable once there is room."""


class ResultsWarning(UserWarning):
    """Something in a run's files was left out while reading it (a row cut short)."""


class NativeError(CxlbenchError):
    """A C entry point failed; carries the C-side message and the errno."""

    def __init__(self, call: str, errno: int, message: str):
        self.call, self.errno = call, errno
        super().__init__(f"{call}: {message}")


class CheckError(CxlbenchError):
    """A kernel's output disagrees with the independently computed value."""
