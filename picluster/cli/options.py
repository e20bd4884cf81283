"""Options and parameter types shared by several commands."""

from decimal import Decimal, InvalidOperation
from pathlib import Path

import click

INT64_MAX = 2**63 - 1

def _inventory(help_text: str):
    return click.option("--inventory", "-i", type=click.Path(dir_okay=False, path_type=Path),
                        envvar="PICLUSTER_INVENTORY", default=None, help=help_text)


inventory_option = _inventory(
    "Inventory file (picluster.toml); env PICLUSTER_INVENTORY.  Without one, the embedded local cluster is used.")
# Commands that act on real nodes only: they say so in one line when it is missing.
node_inventory_option = _inventory("Inventory file (picluster.toml); env PICLUSTER_INVENTORY.  Required.")

class Count(click.ParamType):
    """A positive whole number that fits int64; accepts 1e8, 100000000 and 100_000_000."""

    name = "COUNT"

    def __init__(self, minimum: int = 1, maximum: int = INT64_MAX) -> None:
        self.minimum = minimum
        self.maximum = maximum

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            number = Decimal(value)
        else:
            text = str(value).strip().replace("_", "")
            try:
                number = Decimal(text)
            except InvalidOperation:
                self.fail(f"{value!r} is not a number (write e.g. 1e8 or 100000000)", param, ctx)
            if not number.is_finite():
                self.fail(f"{value!r} is not a finite number", param, ctx)
        if number != number.to_integral_value():
            self.fail(f"{value!r} is not a whole number", param, ctx)
        if number < self.minimum:
            self.fail(f"{value!r} is below the minimum {self.minimum}", param, ctx)
        if number > self.maximum:
            self.fail(f"{value!r} is above the maximum {self.maximum:,}", param, ctx)
        return int(number)


class CountList(click.ParamType):
    """A comma-separated list of Counts, e.g. 1e7,2e7 or 1,2,4,8."""

    name = "LIST"

    def __init__(self, item: Count) -> None:
        self.item = item

    def convert(self, value, param, ctx):
        if isinstance(value, list):
            return value
        parts = [p for p in str(value).split(",")]
        if not parts or any(not p.strip() for p in parts):
            self.fail(f"{value!r} is not a comma-separated list of numbers", param, ctx)
        return [self.item.convert(p, param, ctx) for p in parts]
