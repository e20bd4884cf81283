"""The shared configuration templates in ``files/`` (linked as the top-level ``nfs/``), shipped in the wheel.

They are written in Jinja2 syntax restricted to ``{{ name }}`` so that Ansible's template module
and this tiny renderer give byte-identical files.  Anything else in a template (blocks,
filters, a missing variable) is an error here, so the two paths cannot drift apart silently.
Every value is checked as one plain word of any configuration grammar (``tokens.config_word``:
no whitespace, comment, quote, escape, separator or specifier can reach a file through a
template); a list renders as "a, b".
"""

import re
from pathlib import Path

from picluster.model import tokens
from picluster.util.errors import ClusterError

TEMPLATE_DIR = Path(__file__).resolve().parent / "files"  # nfs/ at the top links here

_VAR = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
_OTHER_JINJA = re.compile(r"\{%|\{#|\{\{")


def template_path(name: str) -> Path:
    return TEMPLATE_DIR / name


def render_text(text: str, variables: dict[str, object], name: str = "template") -> str:
    def substitute(match: re.Match) -> str:
        key = match.group(1)
        if key not in variables:
            raise ClusterError(f"template {name}: no value for {{{{ {key} }}}}")
        return tokens.config_word(variables[key], f"{{{{ {key} }}}} in {name}")

    rendered = _VAR.sub(substitute, text)
    leftover = _OTHER_JINJA.search(_VAR.sub("", text))
    if leftover:
        raise ClusterError(f"template {name}: only {{{{ name }}}} substitutions are allowed")
    return rendered


def render(name: str, **variables: object) -> str:
    path = template_path(name)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ClusterError(f"template {path}: cannot read: {exc.strerror}") from None
    return render_text(text, variables, name)
