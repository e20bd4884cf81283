"""picluster's command groups: what `picluster` or a group typed alone shows, how its list of
commands reads, and the options every command and group has (-v, --debug, -q: cli/options.py)."""

import click

from picluster.cli.options import verbosity_options

# A summary is the first sentence of the command's help, whole (click's own list cuts it at the
# terminal's width with "..."; here the row wraps instead).
WHOLE = 10_000


def with_verbosity(cmd: click.Command) -> click.Command:
    """``cmd`` with -v/--debug/-q among its options, once."""
    have = {p.name for p in cmd.params}
    cmd.params.extend(p for p in verbosity_options() if p.name not in have)
    return cmd


class Group(click.Group):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        with_verbosity(self)

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        super().add_command(with_verbosity(cmd), name)

    def make_context(self, info_name, args, parent=None, **extra) -> click.Context:
        if parent is None:  # a new command line: the level starts where a plain command has it
            from picluster.util import verbosity

            verbosity.set_level(verbosity.NORMAL)
        return super().make_context(info_name, args, parent, **extra)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(limit=WHOLE)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)
