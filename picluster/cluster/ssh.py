"""One node over SSH: commands (as the user or with password-less sudo) and idempotent file writes.

Every failure becomes one of three exceptions with a one-line message:
- Unreachable: the connection failed, or a command got no answer in time;
- SudoPasswordRequired: sudo wants a password, which provisioning never types;
- CommandFailed: a command ran and failed (its last line of stderr says why).
"""

import errno
import io
import logging
import shlex
import socket
from pathlib import Path, PurePosixPath

import fabric
import invoke
import paramiko

from picluster.cluster import hostkeys
from picluster.cluster.knownhosts import SSH_PORT, host_name
from picluster.util import verbosity
from picluster.util.errors import ClusterError

MISSING_EXIT = 3
_UNREAD = object()
BANNER_CLOSED = "connected, but the host closed the connection before the SSH banner"

# paramiko's transport thread logs a failed banner read (a Pi still booting, another device at the
# address) as an ERROR with its traceback, which Python prints on stderr when no handler is set.
# Every failure reaches the caller as one exception with one line: keep paramiko's log out of it.
logging.getLogger("paramiko").addHandler(logging.NullHandler())
# -v: every command run on a node, as Fabric 1 echoed them ("[node01] sudo: systemctl ..."); --debug: how each ended.
log = logging.getLogger(__name__)


class Unreachable(ClusterError):
    pass


class AuthFailed(ClusterError):
    pass


class SudoPasswordRequired(ClusterError):
    pass


class CommandFailed(ClusterError):
    def __init__(self, message: str, why: str = "") -> None:
        super().__init__(message)
        self.why = why  # the command's own last words, for a caller that words its message itself


def connect(
    address: str,
    user: str,
    key: Path | None,
    timeout: float,
    policy: hostkeys.Policy | None = None,
) -> fabric.Connection:
    """A Fabric connection that uses `key` only (or the usual ~/.ssh keys without one), and checks
    the node's host key with `policy` (the process's, picluster.cluster.hostkeys.current(), by
    default): every connection picluster makes is made here, so none goes unchecked."""
    policy = policy or hostkeys.current()
    connect_kwargs: dict[str, object] = {"banner_timeout": timeout, "auth_timeout": timeout}
    if key is not None:
        connect_kwargs.update(key_filename=[str(key)], look_for_keys=False, allow_agent=False)
    conn = fabric.Connection(
        host=address,
        user=user,
        config=fabric.Config(overrides={"run": {"in_stream": False}}),
        connect_timeout=timeout,
        connect_kwargs=connect_kwargs,
    )
    # Fabric sets AutoAddPolicy and loads no key: paramiko then hands every key to the policy.
    conn.client.set_missing_host_key_policy(policy)
    unwanted = policy.unwanted(host_name(conn.host, conn.port))  # the host and port as ~/.ssh/config resolves them
    if unwanted:
        conn.connect_kwargs["disabled_algorithms"] = {"keys": unwanted}
    return conn


class Remote:
    def __init__(
        self, conn: fabric.Connection, user: str, *, dry_run: bool = False, timeout: float = 120.0,
        open_timeout: float = 10.0, name: str | None = None,
    ):  # fmt: skip
        self.conn = conn
        self.user = user
        self.name = name  # the node's, for messages that tell what to type
        self.dry_run = dry_run
        self.timeout = timeout
        self.open_timeout = open_timeout  # connecting, and opening a channel on the connection

    @property
    def label(self) -> str:
        """The node as the log names it: its inventory name, else its address."""
        return self.name or self.conn.host

    def said(self, verb: str, what: str) -> float:
        """Log (-v) what is about to be done on the node; the time it starts, for ``ended``."""
        return verbosity.command(log, self.label, what, verb)

    def ended(self, started: float, exited: int, stderr: str = "") -> None:
        """Log (--debug) how a command ended: its exit status, its time, its last line of stderr."""
        verbosity.ended(log, self.label, started, exited, _last_line(stderr))

    def _connecting(self) -> None:
        log.info("[%s] connect: %s@%s:%s", self.label, self.user, self.conn.host, self.conn.port)

    # -- connection ------------------------------------------------------------------------

    def open(self) -> None:
        """Connect and log in; a node that cannot be reached raises Unreachable with one line that
        says what was seen (nothing listening, no answer, no SSH banner) and not the address, so
        nodes that fail alike fold into one line."""
        if self.conn.is_connected:
            return
        self._connecting()
        if not self.conn.gateway:
            # Our own socket, checked for a first byte of banner, then handed to paramiko: a host
            # that accepts and closes, or never speaks, is named as such, and paramiko never sees it.
            self.conn.connect_kwargs["sock"] = reach(self.conn.host, self.conn.port, self.open_timeout)
        try:
            self._open()
        finally:
            sock = self.conn.connect_kwargs.pop("sock", None)  # a reconnection makes its own
            if sock is not None and not self.conn.is_connected:
                sock.close()
        # Each command opens a channel; paramiko waits an hour for one on a dead link.
        self.conn.transport.channel_timeout = self.open_timeout

    def _open(self) -> None:
        port, seconds = self.conn.port, self.open_timeout
        try:
            self.conn.open()
        except paramiko.AuthenticationException:
            raise AuthFailed(f"SSH key rejected for {self.user}@{self.conn.host} (check cluster.ssh_key)") from None
        except hostkeys.HostKeyRefused as exc:
            # Raised by the policy between the key exchange and the login: nothing was sent.
            self.conn.client.close()
            raise exc.named(self.name) if self.name else exc from None
        except paramiko.SSHException as exc:
            policy = getattr(self.conn.client, "_policy", None)  # set by connect()
            if "no acceptable host key" in str(exc) and isinstance(policy, hostkeys.Policy):
                # Asked only for the types it is known by, the node has none: as changed as a key can be.
                self.conn.client.close()
                refused = policy.no_known_type(host_name(self.conn.host, port))
                raise refused.named(self.name) if self.name else refused from None
            raise Unreachable(ssh_failure(exc, seconds)) from None
        except EOFError:
            raise Unreachable("connected, but the host closed the connection during the SSH handshake") from None
        except OSError as exc:
            raise Unreachable(connect_failure(exc, port, seconds)) from None

    def close(self) -> None:
        try:
            self.conn.close()
        except Exception:  # noqa: S110  (a dead transport may fail to close; nothing to do about it)
            pass

    # -- commands --------------------------------------------------------------------------

    def run(self, command: str, *, sudo: bool = False, check: bool = True, timeout: float | None = None):
        """Run `command` with sh; with sudo as root via `sudo -n` (never a password prompt)."""
        full = f"sudo -n -- sh -c {shlex.quote(command)}" if sudo else command
        if not self.conn.is_connected:  # Fabric connects first: said before the command, as open() says it
            self._connecting()
        started = self.said("sudo" if sudo else "run", command)
        try:
            result = self.conn.run(full, hide=True, warn=True, timeout=timeout or self.timeout, in_stream=False)
        except invoke.exceptions.CommandTimedOut:
            raise Unreachable(f"no answer within {timeout or self.timeout:.0f} s") from None
        except paramiko.AuthenticationException:
            raise AuthFailed(f"SSH key rejected for {self.user}@{self.conn.host} (check cluster.ssh_key)") from None
        except (paramiko.SSHException, OSError, EOFError) as exc:
            if "Timeout opening channel" in str(exc):
                raise Unreachable(f"no answer within {self.open_timeout:.0f} s (opening an SSH channel)") from None
            raise Unreachable(f"connection lost: {_one_line(exc)}") from None
        self.ended(started, result.exited, result.stderr)
        if sudo and result.exited == 1 and "password is required" in result.stderr:
            raise SudoPasswordRequired(f"sudo asks for a password; give {self.user} NOPASSWD sudo")
        if check and result.exited != 0:
            why = _last_line(result.stderr) or _last_line(result.stdout) or f"exit code {result.exited}"
            raise CommandFailed(f"{_short(command)}: {why}")
        return result

    def ok(self, command: str, *, sudo: bool = False) -> bool:
        """Whether `command` exits 0."""
        return self.run(command, sudo=sudo, check=False).exited == 0

    def out(self, command: str, *, sudo: bool = False) -> str:
        return self.run(command, sudo=sudo).stdout.strip()

    # -- files -----------------------------------------------------------------------------

    def read(self, path: str, *, sudo: bool = True) -> str | None:
        """A file's text, None when it does not exist."""
        q = shlex.quote(path)
        result = self.run(f"if [ -e {q} ]; then cat -- {q}; else exit {MISSING_EXIT}; fi", sudo=sudo, check=False)
        if result.exited == MISSING_EXIT:
            return None
        if result.exited != 0:
            raise CommandFailed(f"cannot read {path}: {_last_line(result.stderr)}")
        return result.stdout

    def write(
        self, path: str, content: str, *, mode: str = "0644", owner: str = "root", group: str = "root",
        current: "str | object | None" = _UNREAD,
    ) -> bool:  # fmt: skip
        """Make `path` hold exactly `content`; True when it had to change (or would, in a dry run).

        An existing file keeps its mode; the new content replaces it atomically (same directory, mv).
        `current`: the file's text as the caller just read it (None: missing), to spare a second read.
        """
        if (self.read(path) if current is _UNREAD else current) == content:
            return False
        if not self.dry_run:
            self.replace_file(path, content.encode(), as_root=(f"$(stat -c %a {shlex.quote(path)} 2>/dev/null || echo {mode})", owner, group))
        return True

    def put_secret(self, path: str, data: bytes, *, mode: str = "0400", owner: str = "root", group: str = "root") -> None:
        """Install `data` at `path` with exactly this mode and owner.  The bytes go through the SSH
        channel into a file made 0600 in the target's own directory: no copy in /tmp, no other
        account can read them at any moment, nothing in a command line or a log."""
        if not self.dry_run:
            self.replace_file(path, data, as_root=(mode, owner, group))

    def replace_file(
        self, path: str, data: bytes, *, as_root: tuple[str, str, str] | None = None, timeout: float | None = None,
    ) -> None:  # fmt: skip
        """`data` (on stdin) into ``path.picluster-new`` beside `path`, renamed over it once whole: a
        reader sees the old file or the new one, never half of one; on any failure the new file is
        removed and CommandFailed says why (its ``why``, the shell's last line).

        Without `as_root`, the login user writes it with its umask's mode (a folder it owns, such as
        the share).  With `as_root` = (mode, owner, group), root writes it (sudo), created 0600 so no
        other account reads it meanwhile, and gives it them just before the rename; `mode` may be a
        shell expression (write's keeps the old file's mode), evaluated before anything changes.
        """
        q, new = shlex.quote(path), shlex.quote(path + ".picluster-new")
        parent = shlex.quote(str(PurePosixPath(path).parent))
        # rm first: `cat >` into a leftover of an interrupted write would keep that file's mode and owner.
        if as_root is None:
            decide, write, own = "", f"cat > {new}", ""
        else:
            mode, owner, group = as_root
            decide, write, own = f"m={mode}; ", f"(umask 077 && cat > {new})", f"chown {owner}:{group} {new} && chmod \"$m\" {new} && "
        script = f"{decide}mkdir -p {parent} && rm -f {new} && {write} && {own}mv -f {new} {q} || {{ rc=$?; rm -f {new}; exit $rc; }}"
        exited, stderr = self.feed(script, data, sudo=as_root is not None, timeout=timeout)
        if exited != 0:
            why = _last_line(stderr) or f"exit code {exited}"
            raise CommandFailed(f"cannot write {path}: {why}", why)

    def feed(self, command: str, data: bytes, *, sudo: bool = False, timeout: float | None = None) -> tuple[int, str]:
        """Run `command` with `data` on its standard input (never in a file or an argument);
        returns (exit status, stderr)."""
        full = f"sudo -n -- sh -c {shlex.quote(command)}" if sudo else command
        seconds = timeout or self.timeout
        self.open()
        started = self.said("sudo" if sudo else "run", f"{command}  (with {len(data)} bytes on its standard input)")
        try:
            channel = self.conn.transport.open_session(timeout=self.open_timeout)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise Unreachable(f"no answer within {self.open_timeout:.0f} s (opening an SSH channel)" if "Timeout" in str(exc)
                              else f"connection lost: {_one_line(exc)}") from None
        try:
            channel.settimeout(seconds)
            channel.exec_command(full)
            try:
                channel.sendall(data)
                channel.shutdown_write()
            except OSError:
                pass  # the command ended before reading it all (it failed): its status and stderr say why
            stderr = channel.makefile_stderr("rb").read().decode(errors="replace")
            channel.makefile("rb").read()
            if not channel.status_event.wait(seconds):
                raise Unreachable(f"no answer within {seconds:.0f} s")
            exited = channel.recv_exit_status()
        except TimeoutError:
            raise Unreachable(f"no answer within {seconds:.0f} s") from None
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise Unreachable(f"connection lost: {_one_line(exc)}") from None
        finally:
            channel.close()
        self.ended(started, exited, stderr)
        if sudo and exited == 1 and "password is required" in stderr:
            raise SudoPasswordRequired(f"sudo asks for a password; give {self.user} NOPASSWD sudo")
        return exited, stderr

    def upload(self, content: str, remote_path: str) -> None:
        """`content` into a file of the login user's (SFTP creates it with the server's default
        mode: never a secret, never a shared directory such as /tmp)."""
        self.said("put", f"{remote_path}  ({len(content.encode())} bytes)")
        try:
            self.conn.put(io.BytesIO(content.encode()), remote=remote_path)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise Unreachable(f"upload failed: {_one_line(exc)}") from None


def presented(address: str, timeout: float, port: int = SSH_PORT) -> paramiko.PKey:
    """The host key ``address`` offers a login now: the key exchange only, no authentication, so
    nothing reaches the node (``provision --replaced`` shows it before trusting it)."""
    sock = reach(address, port, timeout)
    transport = paramiko.Transport(sock)
    transport.banner_timeout = timeout
    try:
        transport.start_client(timeout=timeout)
        return transport.get_remote_server_key()
    except (paramiko.SSHException, EOFError, OSError) as exc:
        raise Unreachable(f"no host key read: {_one_line(exc)}") from None
    finally:
        transport.close()


def reach(host: str, port: int, seconds: float) -> socket.socket:
    """A TCP connection to host:port on which the first byte of a banner has arrived (left unread,
    for paramiko); Unreachable with what was seen when there is none within ``seconds``."""
    try:
        sock = socket.create_connection((host, port), timeout=seconds)
    except OSError as exc:
        raise Unreachable(connect_failure(exc, port, seconds)) from None
    try:
        first = sock.recv(1, socket.MSG_PEEK)
    except OSError as exc:
        sock.close()
        raise Unreachable(banner_failure(exc, seconds)) from None
    if not first:
        sock.close()
        raise Unreachable(BANNER_CLOSED)
    return sock


def connect_failure(exc: OSError, port: int, seconds: float) -> str:
    """Why a TCP connection failed, in words that name no address (nodes fold on them)."""
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError) and exc.errors:
        exc = next(iter(exc.errors.values()))  # one per address family; the first says it
    if isinstance(exc, TimeoutError):
        return f"no answer on port {port} within {seconds:g} s"
    if isinstance(exc, socket.gaierror):
        return f"the host name does not resolve ({exc.strerror})"
    if exc.errno == errno.ECONNREFUSED:
        return f"nothing listens on port {port}"
    if exc.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
        return f"no route to the host ({exc.strerror})"
    return f"cannot connect to port {port}: {exc.strerror or _one_line(exc)}"


def banner_failure(exc: BaseException | None, seconds: float) -> str:
    """Why no SSH banner came on an open connection: the host closed it (or reset it), or said nothing."""
    if isinstance(exc, TimeoutError):
        return f"connected, but no SSH banner within {seconds:g} s"
    return BANNER_CLOSED


def ssh_failure(exc: paramiko.SSHException, seconds: float) -> str:
    """paramiko's own failures in words a user can act on (its banner error hides the cause in
    __context__: EOFError when the host closed, TimeoutError when it said nothing)."""
    text = _one_line(exc)
    if text.startswith("Error reading SSH protocol banner"):
        return banner_failure(exc.__context__, seconds)
    if text == "No existing session":  # paramiko gave up waiting for the handshake and tried to log in
        return f"connected, but the SSH handshake did not finish within {seconds:g} s"
    return f"SSH failed: {text}"


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _short(command: str, limit: int = 60) -> str:
    command = " ".join(command.split())
    return command if len(command) <= limit else command[: limit - 3] + "..."
