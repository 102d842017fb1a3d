"""Where a run's ``/metrics`` listens, and how Prometheus finds it.

The supervisor binds the exporter's listening socket itself and keeps it open for the whole run: the
exporter process, and every restart of it, serves on that socket, so the port never changes during a
run and no other process can take it between a check and a bind. ``hil run`` takes a free port when the
configured one is taken; ``hil serve`` keeps its configured port (the service's contract) and, when it is
taken, says which process holds it. Every run announces its address in a Prometheus file-based
service-discovery file of its own (``file_sd_configs``), removed when the run ends.
"""
from __future__ import annotations

import errno
import json
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from hil.telemetry.metrics import MetricsError
from sim.output_file import write_output_text

#: Listen backlog: connections the kernel queues until the exporter accepts them. Accepting (a thread
#: start each) is slower than a client connecting in a loop, so this queue, not the accept rate, is what
#: absorbs a burst; once it is full the kernel drops SYNs and every client waits for a retransmit.
EXPORTER_BACKLOG = 256
#: Longest command line quoted when naming the process that holds a port.
MAX_COMMAND_CHARS = 160
#: Prefix of the file_sd target files; the rest of the name is the supervisor's pid.
TARGET_FILE_PREFIX = "hil-"


@dataclass(frozen=True)
class MetricsPort:
    """Which port a run's exporter takes: ``port`` (0: any free port); ``fixed``: that port or an error
    ending in ``advice`` (``hil serve``, ``hil run --metrics-port``), else any free port when it is taken."""
    port: int
    fixed: bool = False
    advice: str = ""


def listen(host: str, port: int, any_port_if_taken: bool, advice: str = "") -> socket.socket:
    """A TCP socket listening on ``host:port`` (port 0: any free port).

    When the port is taken: a socket on a free port if ``any_port_if_taken``, else MetricsError naming
    the process that holds it, followed by ``advice`` (what the user can do)."""
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        family, _, _, _, sockaddr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                       flags=socket.AI_PASSIVE)[0]
    except (socket.gaierror, UnicodeError) as exc:
        raise MetricsError(f"cannot listen on {where}: {exc.strerror or exc}") from None
    try:
        return _bound_socket(family, (sockaddr[0], port))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE and any_port_if_taken and port:
            return listen(host, 0, False)
        reason = exc.strerror or str(exc)
        if exc.errno == errno.EADDRINUSE:
            reason += f" (held by {port_holder(port)})"
        raise MetricsError(f"cannot listen on {where}: {reason}" + (f"; {advice}" if advice else "")) from None


def _bound_socket(family: int, address: tuple) -> socket.socket:
    """A listening socket of ``family`` on ``address`` (closed again if bind or listen fails)."""
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)   # a restart binds past TIME_WAIT
        sock.bind(address)
        sock.listen(EXPORTER_BACKLOG)
    except BaseException:
        sock.close()
        raise
    return sock


def scrape_address(sock: socket.socket) -> str:
    """``host:port`` a scraper on this computer uses for ``sock`` (a wildcard address as loopback)."""
    host, port = sock.getsockname()[:2]
    if sock.family == socket.AF_INET6:
        return f"[{'::1' if host == '::' else host}]:{port}"
    return f"{'127.0.0.1' if host == '0.0.0.0' else host}:{port}"


def _listening_inodes(port: int) -> list[int]:
    """Socket inodes bound to local TCP ``port`` (IPv4 and IPv6), listening ones first."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or int(fields[1].rsplit(":", 1)[1], 16) != port or fields[9] == "0":
                continue
            found.append((fields[3] != "0A", int(fields[9])))     # state 0A: LISTEN
    return [inode for _, inode in sorted(found)]


def _process_with_socket(inodes: list[int]) -> int | None:
    """The pid of a process with one of ``inodes`` open (None: none visible to this user)."""
    wanted = {f"socket:[{inode}]" for inode in inodes}
    for pid_dir in Path("/proc").iterdir():
        if not pid_dir.name.isdigit():
            continue
        try:
            for fd in (pid_dir / "fd").iterdir():
                if os.readlink(fd) in wanted:
                    return int(pid_dir.name)
        except OSError:         # gone meanwhile, or another user's process
            continue
    return None


def port_holder(port: int) -> str:
    """Which process holds TCP ``port`` on this computer, for an error message."""
    how_to_find = f"`ss -ltnp 'sport = :{port}'` shows which"
    inodes = _listening_inodes(port)
    pid = _process_with_socket(inodes) if inodes else None
    if pid is None:
        return f"another process, not visible to this user: {how_to_find}"
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        command = "".join(c if c.isprintable() else " " for c in raw).strip()
    except OSError:
        command = ""
    if len(command) > MAX_COMMAND_CHARS:
        command = command[:MAX_COMMAND_CHARS - 3] + "..."
    return f"pid {pid}: {command}" if command else f"pid {pid}"


class TargetFile:
    """This run's Prometheus file_sd target file, ``<directory>/hil-<pid>.json``: one file per run, so
    concurrent runs never overwrite each other's entry. Files of runs whose process is gone (killed
    before they could remove theirs) are removed when a run writes its own."""

    def __init__(self, directory: str, address: str) -> None:
        self.directory = Path(directory)
        self.path = self.directory / f"{TARGET_FILE_PREFIX}{os.getpid()}.json"
        self.address = address
        self.written = False

    def write(self) -> None:
        """Write the entry atomically (:mod:`sim.output_file`: Prometheus never reads half a file, and the
        temporary name does not match ``*.json``); raises OSError if the directory cannot be created or written."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self._remove_stale()
        write_output_text(self.path, json.dumps([{"targets": [self.address]}]) + "\n")
        self.written = True

    def remove(self) -> None:
        if self.written:
            self.path.unlink(missing_ok=True)
            self.written = False

    def _remove_stale(self) -> None:
        for path in self.directory.glob(f"{TARGET_FILE_PREFIX}*.json"):
            pid = path.stem[len(TARGET_FILE_PREFIX):]
            if pid.isdigit() and int(pid) != os.getpid() and not _process_exists(int(pid)):
                try:
                    path.unlink(missing_ok=True)
                except OSError:        # another user's file: theirs to remove
                    pass


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:      # another user's process
        return True
    return True
