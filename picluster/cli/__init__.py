"""Command line: parse, call the library, display.  Errors become exit codes here and only here."""

import os
import sys


def _quit_while_loading(signum=None, frame=None) -> None:
    # Ctrl-C while Python still loads the command line: nothing has started, so say so and leave,
    # rather than let a KeyboardInterrupt print a traceback from whichever library was loading.
    os.write(2, b"picluster: error: interrupted\n")
    os._exit(130)


try:
    import signal

    _loading_sigint = signal.signal(signal.SIGINT, _quit_while_loading)
except ValueError:  # imported outside the main thread (a library use): leave signals alone
    _loading_sigint = None
except KeyboardInterrupt:
    _quit_while_loading()

import click  # noqa: E402  (after the handler above: it covers the seconds these imports take)

from picluster import __version__  # noqa: E402
from picluster.cli.group import Group  # noqa: E402
from picluster.util.errors import PiclusterError  # noqa: E402


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="picluster")
def app() -> None:
    """Raspberry Pi parameter-server clusters for distributed TensorFlow."""


def _register() -> None:
    # Subcommand modules import heavy libraries lazily, inside their commands,
    # so `picluster --help` and bad-argument errors stay fast.
    from picluster.cli import cluster, data, execute, jobs, lab, launch, nodes, plot, provision, run, submit, top, train

    app.add_command(cluster.cluster)
    app.add_command(cluster.server)
    app.add_command(run.run)
    app.add_command(data.data)
    app.add_command(lab.lab)
    app.add_command(top.top)
    app.add_command(provision.provision)
    app.add_command(provision.inventory)
    app.add_command(provision.wheelhouse)
    app.add_command(provision.playbooks)
    app.add_command(train.train)
    app.add_command(launch.launch)
    app.add_command(submit.submit)
    app.add_command(jobs.jobs)
    app.add_command(jobs.logs)
    app.add_command(jobs.cancel)
    app.add_command(plot.plot)
    app.add_command(nodes.nodes)
    app.add_command(execute.execute)


def _fail(message: str, code: int, details: tuple[str, ...] = (), trace: bool = True) -> None:
    # One line on stderr, whatever the message held; details (a log's last lines) indented under it.
    # With --debug, the traceback of the error being handled first: where it came from.
    from picluster.util import verbosity

    if trace and verbosity.debugging() and sys.exc_info()[0] is not None:
        import traceback

        traceback.print_exc()
    print(f"picluster: error: {' '.join(str(message).split())}", file=sys.stderr)
    for line in details:
        print(f"  {line}", file=sys.stderr)
    sys.exit(code)


def _interrupted() -> None:
    # CPython (3.8 to 3.12) marks a KeyboardInterrupt that ends a string exec (namedtuple and
    # dataclass creation run one while modules load) as unhandled even when it is caught, and
    # `python -m picluster` then dies by SIGINT instead of exiting 130.  A string eval clears it.
    eval("None")
    _fail("interrupted", 130)


def _terminate(signum, frame) -> None:
    # SIGTERM unwinds like Ctrl-C, so every `finally` stops the servers it started.
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> None:
    try:
        signal.signal(signal.SIGTERM, _terminate)
        _register()
        app.main(args=argv, prog_name="picluster", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        _interrupted()
    except click.exceptions.NoArgsIsHelpError as exc:
        # `picluster` or a group typed alone: what it offers, as --help shows it; not an error.
        click.echo(exc.ctx.get_help())
        sys.exit(0)
    except click.ClickException as exc:
        _fail(exc.format_message() + _usage_hint(exc), exc.exit_code, trace=False)  # click's parsing: no code of ours to show
    except PiclusterError as exc:
        _fail(str(exc), exc.exit_code, exc.details)
    except KeyboardInterrupt:
        _interrupted()
    except BrokenPipeError:
        sys.exit(1)
    except OSError as exc:
        # Storage the library did not wrap in a StorageError (full, read-only, not ours): still one
        # line with the path and the cause.  Other OSErrors are bugs: their traceback is wanted.
        from picluster.util.atomic import STORAGE_ERRNOS

        if exc.errno not in STORAGE_ERRNOS:
            raise
        _fail(f"{exc.filename}: {exc.strerror}" if exc.filename else str(exc.strerror), 1)


def _usage_hint(exc: click.ClickException) -> str:
    ctx = getattr(exc, "ctx", None)
    if ctx is None:
        return ""
    return f" (see '{ctx.command_path} --help')"


if _loading_sigint is not None:  # loaded: Ctrl-C raises KeyboardInterrupt again, so `finally` blocks run
    signal.signal(signal.SIGINT, _loading_sigint)
