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
