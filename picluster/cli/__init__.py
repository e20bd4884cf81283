"""Command line: parse, call the library, display.  Errors become exit codes here and only here."""

import signal
import sys

import click

from picluster import __version__
from picluster.errors import PiclusterError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="picluster")
def app() -> None:
    """Raspberry Pi parameter-server clusters for distributed TensorFlow."""


def _register() -> None:
    # Subcommand modules import heavy libraries lazily, inside their commands,
    # so `picluster --help` and bad-argument errors stay fast.
    from picluster.cli import cluster, data, lab, provision, run, top, train

    app.add_command(cluster.cluster)
    app.add_command(cluster.server)
    app.add_command(run.run)
    app.add_command(data.data)
    app.add_command(lab.lab)
    app.add_command(top.top)
    app.add_command(provision.provision)
    app.add_command(provision.inventory)
    app.add_command(provision.wheelhouse)
    app.add_command(train.train)


def _fail(message: str, code: int) -> None:
    # One line on stderr, whatever the message held.
    print(f"picluster: error: {' '.join(str(message).split())}", file=sys.stderr)
    sys.exit(code)


def _terminate(signum, frame) -> None:
    # SIGTERM unwinds like Ctrl-C, so every `finally` stops the servers it started.
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> None:
    signal.signal(signal.SIGTERM, _terminate)
    _register()
    try:
        app.main(args=argv, prog_name="picluster", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        _fail("interrupted", 130)
    except click.ClickException as exc:
        _fail(exc.format_message() + _usage_hint(exc), exc.exit_code)
    except PiclusterError as exc:
        _fail(str(exc), exc.exit_code)
    except KeyboardInterrupt:
        _fail("interrupted", 130)
    except BrokenPipeError:
        sys.exit(1)


def _usage_hint(exc: click.ClickException) -> str:
    ctx = getattr(exc, "ctx", None)
    if ctx is None:
        return ""
    return f" (see '{ctx.command_path} --help')"
