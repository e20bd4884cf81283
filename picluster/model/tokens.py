"""Strings from outside, checked by what they become.

An inventory value ends up as a field of /etc/exports or /etc/fstab, a line of /etc/hosts, a
word of an nftables rule, nfs.conf, a sysctl or modprobe file, a systemd unit (fstab lines become
mount units), a shell word, or an Ansible variable.  Each grammar has its own separators,
comments, quotes, escapes and specifiers: a tab in ``share_dir`` became extra export options that
exported the share to every host with root squashing off.  Rather than escape for each grammar
(and miss one), a value is accepted only in a form that is one plain token in all of them:

- paths on the nodes (``share_dir``, ``data_dir``, ``venv``): POSIX portable file names (letters,
  digits, '.', '_', '-'; not starting with '-') between '/'s, no '.' or '..' component;
- names: RFC 1123 host names and labels, user names as ``useradd`` takes them;
- every value substituted into a configuration template (``config_word``): letters, digits and
  '._/:-' only; a list is joined by ", " by the renderer, its items checked one by one.

The template renderer and the Ansible inventory both call ``config_word``, so a template added
later is safe by construction: no value reaching it can carry whitespace, a comment, a quote, an
escape, a separator or a specifier.  Ansible gets every value marked ``!unsafe`` as well, so Jinja
never evaluates one (provision/ansible_inventory.py).  Each check raises UsageError naming the key.
"""

import ipaddress
import re
import reprlib
from pathlib import PurePosixPath

from picluster.util.errors import UsageError

PATH_MAX = 4095  # Linux's, without the terminating NUL
NAME_MAX = 255
_PORTABLE = re.compile(r"[A-Za-z0-9._-]+")  # POSIX.1-2017 3.282, the portable filename character set
_LABEL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")  # RFC 1123 2.1
_USER = re.compile(r"[a-z_][a-z0-9_-]{0,31}")  # Debian's adduser NAME_REGEX, without the trailing '$'
_WORD = re.compile(r"[A-Za-z0-9._/:-]+")
# sshd(8) AUTHORIZED_KEYS FILE FORMAT without the options field: type, base64 key, optional comment.
_PUBLIC_KEY = re.compile(r"(ssh|ecdsa|sk)-[A-Za-z0-9@.-]{1,64} [A-Za-z0-9+/]{1,16384}={0,3}( [ -~]{0,512})?")
# sbatch --time: minutes, minutes:seconds, hours:minutes:seconds, days-hours,
# days-hours:minutes, days-hours:minutes:seconds (sbatch(1)); slurm.conf's times take the same.
_TIME = re.compile(r"(?:(\d{1,3})-(\d{1,2})(?::(\d{1,2})(?::(\d{1,2}))?)?|(\d{1,6})(?::(\d{1,2})(?::(\d{1,2}))?)?)", re.ASCII)
_MEM = re.compile(r"(\d{1,9})([KMGT]?)", re.ASCII)  # sbatch --mem: megabytes unless K, M, G or T follows
MAX_TIME_S = 365 * 24 * 3600
_SHOW = reprlib.Repr()
_SHOW.maxstring = 60


def show(value: object) -> str:
    """``value`` for a one-line message: quoted, control characters escaped, cut when long."""
    return _SHOW.repr(value)


def node_path(value: object, key: str, relative: bool = False) -> str:
    """A path on the nodes, normalised: absolute, or with ``relative`` also under the user's home
    (``x`` or ``~/x``, returned as given)."""
    if not isinstance(value, str):
        raise UsageError(f"{key} must be a path string, got {show(value)}")
    text = value.removeprefix("~/") if relative else value
    if not text.startswith("/") and not relative:
        raise UsageError(f"{key} {show(value)} must be an absolute path (starting with '/')")
    parts = [p for p in text.split("/") if p]
    if not parts:
        raise UsageError(f"{key} {show(value)} may not be / or empty")
    for part in parts:
        if not _PORTABLE.fullmatch(part):
            bad = next((c for c in part if not _PORTABLE.fullmatch(c)), part[:1])
            raise UsageError(f"{key} {show(value)} contains {show(bad)}: use letters, digits, '.', '_', '-' between '/'s "
                             "(the value is written into /etc/exports, /etc/fstab and shell commands)")
        if part in (".", ".."):
            raise UsageError(f"{key} {show(value)} may not contain '.' or '..' components")
        if part.startswith("-"):  # POSIX's advice for portable names; a command would read it as an option
            raise UsageError(f"{key} {show(value)} has a component starting with '-'")
        if len(part) > NAME_MAX:
            raise UsageError(f"{key} {show(value)} has a component longer than {NAME_MAX} characters")
    if len(value) > PATH_MAX:
        raise UsageError(f"{key} is longer than {PATH_MAX} characters")
    return "/" + "/".join(parts) if text.startswith("/") else value


def local_path(value: object, key: str) -> str:
    """A path on this machine only (the SSH key): printable, without whitespace, quotes or backslashes.

    It is never written into a node's file, but reaches ssh's own option parser and Ansible."""
    if not isinstance(value, str) or not value:
        raise UsageError(f"{key} must be a non-empty path string, got {show(value)}")
    bad = next((c for c in value if not c.isprintable() or c.isspace() or c in "\"'\\"), None)
    if bad is not None:
        raise UsageError(f"{key} {show(value)} contains {show(bad)}: no whitespace, control characters, quotes or backslashes")
    if len(value) > PATH_MAX:
        raise UsageError(f"{key} is longer than {PATH_MAX} characters")
    return value


def label(value: object, key: str) -> str:
    """One RFC 1123 label: letters, digits and '-', not at the ends, at most 63 characters."""
    if not isinstance(value, str) or not _LABEL.fullmatch(value):
        raise UsageError(f"{key} {show(value)} must be letters, digits and '-' (not at the ends, max 63)")
    return value


def hostname(value: object, key: str) -> str:
    """An RFC 1123 host name: labels joined by '.', at most 253 characters."""
    if not isinstance(value, str) or len(value) > 253 or not all(_LABEL.fullmatch(part) for part in value.split(".")):
        raise UsageError(f"{key} {show(value)} is not a valid hostname (RFC 1123: letters, digits, '-', not at the ends)")
    return value


def user_name(value: object, key: str) -> str:
    if not isinstance(value, str) or not _USER.fullmatch(value):
        raise UsageError(f"{key} {show(value)} is not a valid user name (lower-case letters, digits, '_', '-'; max 32)")
    return value


def public_key_line(value: object, key: str) -> str:
    """An OpenSSH public key line as it goes into authorized_keys: one line, no options field
    (``command="..."`` and the like), a printable ASCII comment at most."""
    if not isinstance(value, str) or not _PUBLIC_KEY.fullmatch(value):
        raise UsageError(f"{key} is not one OpenSSH public key line (type, base64 key, optional comment): {show(value)}")
    return value


def config_word(value: object, key: str) -> str:
    """``value`` as it is substituted into a configuration file: one plain word of every grammar there.

    Integers, IPv4 addresses and networks, and strings of letters, digits and '._/:-'; a list or
    tuple gives its items joined by ", " (e.g. the ports of an nftables set)."""
    if isinstance(value, (list, tuple)):
        if not value:
            raise UsageError(f"{key} is an empty list")
        return ", ".join(config_word(item, key) for item in value)
    if isinstance(value, bool):
        raise UsageError(f"{key} must be a number or a word, got a boolean")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, (ipaddress.IPv4Address, ipaddress.IPv4Network, PurePosixPath)):
        value = str(value)
    if not isinstance(value, str) or not _WORD.fullmatch(value):
        raise UsageError(f"{key} {show(value)} cannot go into a configuration file: only letters, digits and '._/:-' can")
    return value


def slurm_seconds(value: object, key: str) -> int:
    """A time limit in Slurm's forms (sbatch --time, slurm.conf's MaxTime), in seconds."""
    m = _TIME.fullmatch(value) if isinstance(value, str) else None
    if m is None:
        raise UsageError(f"{key} {show(value)}: use minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS (as sbatch)")
    days, dh, dm, ds, mins, ms, ss = m.groups()
    if days is not None:
        total = int(days) * 86400 + int(dh) * 3600 + int(dm or 0) * 60 + int(ds or 0)
        parts = [int(dh), int(dm or 0), int(ds or 0)]
        limits = [23, 59, 59]
    elif ss is not None:  # HH:MM:SS
        total, parts, limits = int(mins) * 3600 + int(ms) * 60 + int(ss), [int(ms), int(ss)], [59, 59]
    else:  # minutes[:seconds]
        total, parts, limits = int(mins) * 60 + int(ms or 0), [int(ms or 0)], [59]
    if any(p > lim for p, lim in zip(parts, limits)):
        raise UsageError(f"{key} {value}: hours go to 23, minutes and seconds to 59")
    if total <= 0:
        raise UsageError(f"{key} {value}: give a limit above zero")
    if total > MAX_TIME_S:
        raise UsageError(f"{key} {value}: more than 365 days")
    return total


def slurm_megabytes(value: object, key: str) -> int:
    """A memory size in sbatch's forms (megabytes, or with K, M, G or T), in megabytes."""
    m = _MEM.fullmatch(value) if isinstance(value, str) else None
    if m is None:
        raise UsageError(f"{key} {show(value)}: give a whole number of megabytes, or with K, M, G or T (e.g. 512M, 2G)")
    number, unit = int(m.group(1)), m.group(2) or "M"
    mb = {"K": number / 1024, "M": number, "G": number * 1024, "T": number * 1024 * 1024}[unit]
    if mb < 1:
        raise UsageError(f"{key} {value}: at least 1 megabyte")
    return int(mb)


def slurm_duration(seconds: int) -> str:
    """Seconds as D-HH:MM:SS, one form Slurm reads and YAML cannot mistake for a number
    (YAML 1.1 reads 1:00:00 as 3600, which Slurm then takes as minutes)."""
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"
