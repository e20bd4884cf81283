"""TensorFlow's C++ start-up lines, kept off the terminal.

Importing TensorFlow 2.21 writes "WARNING: All log messages before absl::InitializeLog() is called
are written to STDERR" and oneDNN's "custom operations are on" notice straight to file descriptor
2, twice, before its logging is set up, so ``TF_CPP_MIN_LOG_LEVEL`` cannot silence them.  A process
whose stderr is a terminal imports TensorFlow through :func:`import_tensorflow`: file descriptor 2
points at a temporary file for the import, and what the import wrote goes back to stderr without
the start-up lines.  Anything else (a Python warning, an error) still reaches the user.  Processes
whose stderr is a log (servers, training clients) import TensorFlow plainly: their logs keep it.

Nothing changes TensorFlow's numerics: oneDNN stays on; only its notice is dropped.
"""

import os
import re
import sys
import tempfile
from types import ModuleType

# One C++ log line: severity and date (I1124), time or TensorFlow's "00:00:<epoch>", thread id, file:line].
CPP_LOG = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d+(\.\d+)? +\d+ [\w./-]+:\d+\] ")
ABSL_PREINIT = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
# cpu_feature_guard's notice runs over two lines; the second has no prefix of its own.
_CPU_NOTICE = "To enable the following instructions:"


def cpp_line(line: str) -> bool:
    """A line of TensorFlow's C++ logging (absl's pre-initialisation warning included)."""
    return line.startswith(ABSL_PREINIT) or CPP_LOG.match(line) is not None


def startup_line(line: str) -> bool:
    """What TensorFlow prints while it starts, for the log rather than the user: absl's
    pre-initialisation warning, informational C++ lines (oneDNN's notice, the CPU features it was
    not built for, "Started server with target").  Its warnings and errors are not among them."""
    line = line.rstrip("\r\n")
    return line == ABSL_PREINIT or line.startswith(_CPU_NOTICE) or (line.startswith("I") and CPP_LOG.match(line) is not None)


def without_startup_lines(text: str) -> str:
    return "".join(line for line in text.splitlines(keepends=True) if not startup_line(line))


def import_tensorflow() -> ModuleType:
    """``import tensorflow``, with its start-up lines dropped from this process's stderr."""
    if "tensorflow" in sys.modules:
        return sys.modules["tensorflow"]
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            import tensorflow
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            rest = without_startup_lines(capture.read().decode("utf-8", "replace"))
            if rest:
                os.write(2, rest.encode())
    return tensorflow
