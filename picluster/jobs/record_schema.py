"""The job records' schema, and each row read back checked value by value.

``jobs.db`` is a file in the user's state directory: anything may have written it (a newer
picluster, another program, a disk that lost a page).  So the schema is checked when the file
is opened — a database of a newer schema or of another program is named and left as it is,
never relabelled or given our tables — and every value of every row is checked for type and
range as it is read: a damaged row is named by its job id, and the others still read.
"""

import json
import math
import sqlite3
from pathlib import Path

from picluster.util.errors import UsageError

STATES = ("PENDING", "RUNNING", "COMPLETED", "FAILED", "CANCELLED")
INT64_MAX = 2**63 - 1  # SQLite's INTEGER: a job id or a limit above this cannot be asked for
VERSION = 2  # 2: jobs.pid_cmdline (the coordinator's command line, to prove a pid is still it)
_TABLES = """
CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    mode TEXT NOT NULL DEFAULT '',
    state TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT '',
    cluster TEXT NOT NULL DEFAULT '',
    nodes TEXT NOT NULL DEFAULT '',
    command TEXT NOT NULL DEFAULT '[]',
    log_dir TEXT NOT NULL DEFAULT '',
    pid INTEGER,
    pid_start REAL,
    created REAL NOT NULL,
    started REAL,
    ended REAL,
    restarts INTEGER NOT NULL DEFAULT 0,
    cancel_requested REAL,
    pid_cmdline TEXT
);
CREATE TABLE IF NOT EXISTS tasks (
    job_id INTEGER NOT NULL REFERENCES jobs(id),
    label TEXT NOT NULL,
    node TEXT NOT NULL,
    log TEXT NOT NULL DEFAULT '',
    state TEXT NOT NULL DEFAULT 'PENDING',
    exit_codes TEXT NOT NULL DEFAULT '[]',
    PRIMARY KEY (job_id, label)
);
"""
JOB_COLUMNS = ("id", "name", "kind", "mode", "state", "reason", "cluster", "nodes", "command", "log_dir", "pid",
               "pid_start", "created", "started", "ended", "restarts", "cancel_requested", "pid_cmdline")
TASK_COLUMNS = ("job_id", "label", "node", "log", "state", "exit_codes")
_V1_JOB_COLUMNS = JOB_COLUMNS[:-1]


class DamagedRow(ValueError):
    """One row's value is not what picluster writes; the message says which."""


def job_id_arg(value: int, what: str = "JOB") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= INT64_MAX:
        raise UsageError(f"{what} {value}: give a job id between 1 and {INT64_MAX}")
    return value


def prepare(conn: sqlite3.Connection, path: Path) -> None:
    """Make ``conn``'s database ours at VERSION, or refuse it in one line without touching it."""
    # One read transaction: the version and the tables seen from the same moment.  Read apart, a
    # first command creating the tables between the two reads looked like a foreign database.
    conn.execute("BEGIN")
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        have_jobs, have_tasks = _columns(conn, "jobs"), _columns(conn, "tasks")
    finally:
        conn.execute("COMMIT")
    tables -= {"sqlite_sequence"}
    if version > VERSION:
        raise UsageError(f"job records {path} were written by a newer picluster (schema {version}; this one reads "
                         f"up to {VERSION}): use that picluster, or move the file away to start new records")
    if version == 0 and not tables:
        _create(conn)
        return
    want = {0: None, 1: _V1_JOB_COLUMNS, VERSION: JOB_COLUMNS}[version]
    if want is None or not set(want) <= have_jobs or not set(TASK_COLUMNS) <= have_tasks:
        missing = sorted((set(want or JOB_COLUMNS) - have_jobs) | (set(TASK_COLUMNS) - have_tasks))
        raise UsageError(f"{path} is not picluster's job records (tables {', '.join(sorted(tables)) or 'none'}"
                         + (f"; missing columns {', '.join(missing)}" if missing else "")
                         + "): move it away, or point PICLUSTER_STATE_DIR elsewhere; it was left as it is")
    if version < VERSION:
        _upgrade(conn)


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}


def _create(conn: sqlite3.Connection) -> None:
    conn.execute("PRAGMA journal_mode = WAL")  # readers never block the writer, nor it them; it sticks to the file
    conn.execute("BEGIN IMMEDIATE")  # two first commands at once: one creates, the other waits and sees it done
    try:
        if conn.execute("PRAGMA user_version").fetchone()[0] == 0:
            for statement in _TABLES.split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _upgrade(conn: sqlite3.Connection) -> None:
    """Our own older schema (1): add what it lacks; its rows keep their meaning."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        if conn.execute("PRAGMA user_version").fetchone()[0] == 1:
            conn.execute("ALTER TABLE jobs ADD COLUMN pid_cmdline TEXT")
            conn.execute(f"PRAGMA user_version = {VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


# -- values, checked one by one -----------------------------------------------------------------

def text(row, key: str) -> str:
    value = row[key]
    if not isinstance(value, str):
        raise DamagedRow(f"{key} is {_shown(value)}, not text")
    return value


def state(row, key: str = "state") -> str:
    value = text(row, key)
    if value not in STATES:
        raise DamagedRow(f"{key} {_shown(value)} is none of {', '.join(STATES)}")
    return value


def integer(row, key: str, low: int = 0) -> int:
    value = row[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise DamagedRow(f"{key} is {_shown(value)}, not a whole number of at least {low}")
    return value


def optional_integer(row, key: str, low: int = 0) -> int | None:
    return None if row[key] is None else integer(row, key, low)


def moment(row, key: str) -> float:
    """A time in seconds since the epoch (SQLite may hand back a REAL that was whole as an int)."""
    value = row[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise DamagedRow(f"{key} is {_shown(value)}, not a time")
    return float(value)


def optional_moment(row, key: str) -> float | None:
    return None if row[key] is None else moment(row, key)


def strings(row, key: str) -> list[str]:
    """A JSON list of strings (a command line)."""
    parsed = _json(row[key], key)
    if not isinstance(parsed, list) or not all(isinstance(part, str) for part in parsed):
        raise DamagedRow(f"{key} is not a list of strings")
    return parsed


def optional_strings(row, key: str) -> list[str] | None:
    return None if row[key] is None else strings(row, key)


def exit_codes(row, key: str = "exit_codes") -> list[int | None]:
    parsed = _json(row[key], key)
    if not isinstance(parsed, list) or not all(c is None or (isinstance(c, int) and not isinstance(c, bool)
                                                             and -2**31 <= c < 2**31) for c in parsed):
        raise DamagedRow(f"{key} is not a list of exit codes")
    return parsed


def _json(value, key: str):
    if not isinstance(value, str):
        raise DamagedRow(f"{key} is {_shown(value)}, not JSON text")
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        raise DamagedRow(f"{key} is not JSON") from None


def _shown(value) -> str:
    shown = repr(value)
    return shown if len(shown) <= 40 else shown[:37] + "..."
