"""What every helper process of the service shares: learning that its parent died, and the start-up
handshake ("start a helper process and wait until it is ready").

Parent death (Linux prctl(2), PR_SET_PDEATHSIG): the kernel sends the child a signal when the thread
that created it exits, however it exits (SIGKILL included), so a helper whose parent is gone stops
itself instead of running on, reparented to PID 1. Helpers also compare ``os.getppid()`` with the pid
they were started by, which closes the race of a parent dying before the prctl call.

Handshake: the helper gets the sending end of a one-way pipe and sends ``("ready", info)`` or
``("error", message)`` once. The parent closes its copy of that end right after the start, so a helper
that dies before answering gives EOF at once: no start-up waits out a timeout for a dead process.
The pipe stays open for the run, so a helper can report a later failure (``("failed", message)``).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal

from sim.errors import UserInputError

PR_SET_PDEATHSIG = 1
PR_SET_NAME = 15


class HelperStartError(UserInputError, RuntimeError):
    """A helper process did not start (its own message, or that it died or did not answer)."""


def set_parent_death_signal(sig: int = signal.SIGTERM) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent exits; False where refused."""
    return _prctl(PR_SET_PDEATHSIG, int(sig))


def _prctl(option: int, arg) -> bool:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        return libc.prctl(option, arg, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def name_process(name: str) -> bool:
    """Show this process as ``name`` (at most 15 bytes) in ps, top and pgrep (prctl PR_SET_NAME)."""
    return _prctl(PR_SET_NAME, ctypes.c_char_p(name.encode()[:15]))


def die_with_parent(parent_pid: int, sig: int = signal.SIGTERM, name: str | None = None) -> bool:
    """:func:`set_parent_death_signal` (and :func:`name_process`), then whether the parent is still
    ``parent_pid`` (False: it died before the call, and no signal will come)."""
    if name:
        name_process(name)
    set_parent_death_signal(sig)
    return os.getppid() == parent_pid


def start_helper(ctx, target, args: tuple, name: str, what: str, timeout_s: float = 60.0, daemon: bool = True):
    """Start ``target(*args, conn)`` as process ``name`` and wait for its answer on ``conn``.

    Returns ``(process, info, pipe)``; ``pipe`` carries the helper's later reports (see
    :func:`poll_report`). Raises :class:`HelperStartError` naming ``what`` if the helper reports an error,
    dies, or does not answer within ``timeout_s``."""
    parent_conn, child_conn = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=target, args=(*args, child_conn), name=name, daemon=daemon)
    proc.start()
    child_conn.close()            # the helper holds the only sending end: its death is EOF here
    try:
        if not parent_conn.poll(timeout_s):
            raise HelperStartError(f"{what} did not start within {timeout_s:g} s")
        try:
            status, info = parent_conn.recv()
        except EOFError:
            proc.join(2.0)
            raise HelperStartError(f"{what} exited during start-up (exit code {proc.exitcode})") from None
        if status != "ready":
            raise HelperStartError(str(info))
    except BaseException:
        parent_conn.close()
        stop_process(proc, 2.0)
        raise
    return proc, info, parent_conn


def poll_report(pipe) -> str | None:
    """A failure the helper reported on its pipe since the last call, without blocking (None: none)."""
    try:
        if pipe is None or not pipe.poll():
            return None
        status, info = pipe.recv()
    except (EOFError, OSError):
        return None              # the helper is gone without a word: its exit code tells
    return None if status == "ready" else str(info)


def stop_process(proc, timeout_s: float) -> None:
    """Wait up to ``timeout_s`` for ``proc`` to exit, then SIGTERM, then SIGKILL."""
    if proc is None or proc.pid is None:
        return
    proc.join(timeout_s)
    if proc.is_alive():
        proc.terminate()
        proc.join(2.0)
    if proc.is_alive():
        proc.kill()
        proc.join(2.0)
