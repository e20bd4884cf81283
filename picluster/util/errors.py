"""Domain errors.  The CLI maps each class to an exit code in one place (cli/__init__.py)."""


class PiclusterError(Exception):
    """Base class: the message is one line meant for the user.

    ``details``: lines the CLI prints under it, indented (e.g. the end of a dead process's log).
    """

    exit_code = 1
    details: tuple[str, ...] = ()


class UsageError(PiclusterError):
    """Bad input the user can fix: arguments, inventory, data files (exit code 2)."""

    exit_code = 2


class ClusterError(PiclusterError):
    """A cluster could not be started, reached or stopped (exit code 1)."""

    exit_code = 1


# A child process (the HAR replica) exits with this after a StorageError (sysexits.h EX_IOERR),
# so its parent knows the cause even when the child's log, on the same full disk, is empty.
STORAGE_EXIT = 74


class StorageError(PiclusterError, OSError):
    """A file could not be written: disk full, permission denied, read-only file system (exit code 1).

    Also an OSError, so code that handles OSError around a write keeps doing so; the message
    names the path and the cause: ``cannot write /run/metrics.csv: No space left on device``.
    """

    exit_code = 1

    def __init__(self, path, cause: OSError | str) -> None:
        why = cause if isinstance(cause, str) else (cause.strerror or str(cause))
        super().__init__(getattr(cause, "errno", None), why, str(path))
        self.path, self.why = str(path), why

    def __str__(self) -> str:
        return f"cannot write {self.path}: {self.why}"
