"""A job's output as ``picluster logs`` prints it: for people, the bytes as they were written (a
task's lines after its label when several tasks' logs are shown); ``--parsable``, a line per
output line, ``task|node|text``; ``--json``, one document (``picluster.logs/1``) with each task's
lines, and how the job stood when it was read.
"""

import json
from typing import Any, BinaryIO

from picluster.views.listing import SEPARATOR, parsable_line

LOG_FIELDS = ("task", "node", "text")


class LogWriter:
    """Takes the output piece by piece (``emit``), from one source or several, and writes it in
    the form asked for; ``end`` writes what a piece left unfinished (and the JSON document)."""

    def __init__(self, out: BinaryIO, form: str, header: bool = True, prefix: bool = False) -> None:
        self.out, self.form, self.prefix = out, form, prefix  # form: "human", "parsable" or "json"
        self._partial: dict[Any, bytes] = {}
        self._tasks: dict[Any, dict[str, Any]] = {}
        self._header = form == "parsable" and header  # written with the first line, or at the end: never before an error

    def emit(self, source, data: bytes) -> None:
        """New bytes from ``source`` (a jobs.follow.Source: task, node, log)."""
        if self.form == "human" and not (self.prefix and source.task not in ("output", "batch")):
            self.out.write(data)  # the bytes as they are: a log may hold anything
            self.out.flush()
            return
        lines = (self._partial.pop(source, b"") + data).split(b"\n")
        if lines[-1]:
            self._partial[source] = lines[-1]
        for line in lines[:-1]:
            self._line(source, line)
        self.out.flush()

    def _line(self, source, raw: bytes) -> None:
        text = raw.decode("utf-8", errors="replace").removesuffix("\r")
        if self.form == "human":
            self._write(f"{source.task}: {text}\n")
        elif self.form == "parsable":
            self._head()
            self._write(parsable_line([source.task, source.node, text]) + "\n")
        else:
            task = self._tasks.setdefault(source, {"task": source.task, "node": source.node, "log": source.log, "lines": []})
            task["lines"].append(text)

    def end(self, ended) -> None:
        """The unfinished last lines, then (--json) the document: the job's id and state (a
        jobs.follow.Ended) with its tasks' lines."""
        for source, rest in list(self._partial.items()):
            del self._partial[source]
            self._line(source, rest)
        self._head()
        if self.form == "json":
            document = {"schema": "picluster.logs/1", "job": ended.ref, "state": ended.state, "reason": ended.reason,
                        "exit_code": ended.exit_code, "ended": not ended.active, "tasks": list(self._tasks.values())}
            self._write(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
        self.out.flush()

    def _head(self) -> None:
        if self._header:
            self._header = False
            self._write(SEPARATOR.join(LOG_FIELDS) + "\n")

    def _write(self, text: str) -> None:
        self.out.write(text.encode("utf-8", errors="replace"))

