"""A single key press on the terminal (for `q` to quit), without echo or waiting for Enter."""

import os
import select
import sys
import termios
import tty


class QuitKey:
    def __init__(self, keys: str = "qQ") -> None:
        self.keys = keys
        self._saved: list | None = None

    def __enter__(self) -> "QuitKey":
        if sys.stdin.isatty():
            fd = sys.stdin.fileno()
            self._saved = termios.tcgetattr(fd)
            tty.setcbreak(fd)  # Ctrl-C still raises KeyboardInterrupt in cbreak mode
        return self

    def __exit__(self, *exc) -> None:
        if self._saved is not None:
            termios.tcsetattr(sys.stdin.fileno(), termios.TCSADRAIN, self._saved)

    def pressed(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds; True if a quit key came."""
        if self._saved is None:
            select.select([], [], [], timeout)
            return False
        ready, _, _ = select.select([sys.stdin], [], [], timeout)
        return bool(ready) and os.read(sys.stdin.fileno(), 1).decode(errors="ignore") in self.keys
