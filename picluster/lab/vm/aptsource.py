"""Which Debian mirror to build the VM image from: the one this machine's apt sources already name.

The image is built from the Debian registry only, through the mirror the machine is set up for
(a site may point apt at its own mirror; nothing else would be reachable).  Both source formats are
read: deb822 (/etc/apt/sources.list.d/*.sources) and one-line (sources.list, *.list).
"""

from pathlib import Path

from picluster.util.errors import UsageError

SOURCES = Path("/etc/apt")


def debian_mirror(suite: str, root: Path = SOURCES) -> str:
    """The URI of a `deb` source serving `suite` (e.g. bookworm) with component main."""
    for uri, suites, components in _entries(root):
        if suite in suites and "main" in components and "security" not in uri:
            return uri.rstrip("/")
    raise UsageError(
        f"no Debian {suite} mirror in {root}/sources.list(.d): the VM image is built with debootstrap "
        f"from the mirror apt uses; add one (deb <mirror> {suite} main)"
    )


def _entries(root: Path):
    files = []
    if (root / "sources.list").is_file():
        files.append(root / "sources.list")
    if (root / "sources.list.d").is_dir():
        files += sorted((root / "sources.list.d").iterdir())
    for path in files:
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        if path.suffix == ".sources":
            yield from _deb822(text)
        elif path.suffix == ".list" or path.name == "sources.list":
            yield from _one_line(text)


def _one_line(text: str):
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        words = line.split()
        if not words or words[0] != "deb":
            continue
        words = words[1:]
        if words and words[0].startswith("["):  # options: [arch=amd64 signed-by=...]
            while words and not words[0].endswith("]"):
                words = words[1:]
            words = words[1:]
        if len(words) >= 3:
            yield words[0], {words[1]}, set(words[2:])


def _deb822(text: str):
    # Stanzas are separated by blank lines; a field may continue on indented lines.
    for stanza in text.split("\n\n"):
        fields: dict[str, str] = {}
        key = None
        for line in stanza.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            if line[0].isspace() and key:
                fields[key] += " " + line.strip()
            elif ":" in line:
                key, value = line.split(":", 1)
                key = key.strip().lower()
                fields[key] = value.strip()
        if "deb" not in fields.get("types", "").split() or fields.get("enabled", "yes").lower() == "no":
            continue
        suites = set(fields.get("suites", "").split())
        components = set(fields.get("components", "").split())
        for uri in fields.get("uris", "").split():
            yield uri, suites, components
