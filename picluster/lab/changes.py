"""What provisioning changed inside a namespace host: its private layers (the overlays' upper
directories and the mock boot partition) fingerprinted now, against the lab's own seeding or
an earlier fingerprint.  Tests use it to show that provisioning wrote exactly what it reports,
and that a second run writes nothing.  (A VM host has no overlay: see vm/host.py.)"""

import json
import os
from pathlib import Path

from picluster.lab import mockpi, snapshot

# sshd records every login here; those are not changes anybody made to the host.
LOGIN_RECORDS = ("/var/log/wtmp", "/var/log/btmp", "/var/log/lastlog")


class Changes:
    """Mixed into Host, which supplies ``dir`` (the host's run dir) and ``layers()``."""

    dir: Path

    def layers(self) -> list[tuple[str, Path]]:
        raise NotImplementedError

    def manifest(self) -> dict[str, str | None]:
        """Fingerprint (as the host sees it) of everything written to the host's private layers."""
        result: dict[str, str | None] = {}
        for target, upper in self.layers():
            for rel, value in snapshot.tree(upper).items():
                result[os.path.join(target, rel)] = value
        return result

    def save_baseline(self) -> None:
        (self.dir / "baseline.json").write_text(json.dumps(self.manifest(), sort_keys=True))

    def baseline(self) -> dict[str, str | None]:
        """The manifest when the lab came up: the lab's own seeding (user, mocks, hostname)."""
        return json.loads((self.dir / "baseline.json").read_text())

    def changes(
        self,
        since: dict[str, str | None] | None = None,
        ignore: tuple[str, ...] = LOGIN_RECORDS,
    ) -> list[snapshot.Change]:
        """What was added, modified or deleted inside the host's layers since `since`.

        `since` is an earlier manifest(); by default the one taken when the lab came up.  A path
        that is in neither manifest shows the machine's own file, which is the overlay's lower.
        """
        before = self.baseline() if since is None else since
        now = self.manifest()
        view_before, view_after = {}, {}
        for path in set(before) | set(now):
            if path in ignore:
                continue
            lower = None if (path in before and path in now) else self._lower(path)
            view_before[path] = before.get(path, lower)
            view_after[path] = now.get(path, lower)
        return snapshot.diff(view_before, view_after)

    def _lower(self, path: str) -> str | None:
        if path == mockpi.BOOT_FIRMWARE or path.startswith(mockpi.BOOT_FIRMWARE + "/"):
            return None  # the mock boot partition has nothing below it
        return snapshot.fingerprint(path)
