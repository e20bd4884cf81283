"""Confirmation before what cannot be undone (clig.dev's rule): a prompt on a terminal, ``--yes``
to skip it, and a refusal without ``--yes`` where nobody can answer (a script, a pipe, cron)."""

import sys

import click

from picluster.cli.options import option
from picluster.util.errors import UsageError

yes_option = option("--yes", "-y", "yes", is_flag=True, help="Do it without asking (needed when not on a terminal).")


def confirm(action: str, yes: bool) -> None:
    """Go on when ``yes`` or when the person at the terminal says so; otherwise one line, exit 2.

    ``action`` says what would happen, in words a person can check (``shut down node[02-16]``)."""
    if yes:
        return
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        raise UsageError(f"{action} cannot be undone: not on a terminal to ask, so nothing was done; add --yes to go ahead")
    if not click.confirm(f"{action}: go ahead?", default=False, err=True):
        raise UsageError(f"{action}: not confirmed, nothing was done")
