"""picluster's command groups: what `picluster` or a group typed alone shows, and how its list of
commands reads."""

import click

# A summary is the first sentence of the command's help, whole (click's own list cuts it at the
# terminal's width with "..."; here the row wraps instead).
WHOLE = 10_000


class Group(click.Group):
    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(limit=WHOLE)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)
