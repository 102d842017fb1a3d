"""The orphan watch: a small process the supervisor starts next to the real-time process, so that a real-time
process stuck in a controller's ``step()`` cannot outlive a supervisor killed with SIGKILL.

The real-time process stops by itself when its supervisor dies (PR_SET_PDEATHSIG sends it SIGTERM, and its
loop checks its parent between ticks), unless its loop is stuck: a SIGTERM handler cannot end a call that
never returns, and a controller stuck in C code holding the GIL does not even let the handler run. This
process runs no plug-in code and needs nothing from the real-time process. It waits for the real-time
process to exit or the supervisor to die; after the supervisor's death it lets the real-time process stop by
itself while its ticks advance (or while it is past its loop, for at most GIVE_UP_S), and kills it (SIGKILL
through a pidfd, so never a process that reused the pid) once its ticks have stopped for ORPHAN_STALL_S.
It then removes the port file the killed process could not remove. The link processes die with the
real-time process (their PR_SET_PDEATHSIG is SIGKILL), the recorder drains and closes the file, and the
multiprocessing resource tracker unlinks the shared memory once the last of them is gone.
"""
from __future__ import annotations

import contextlib
import os
import select
import signal
import time
from dataclasses import dataclass

from drivers.ipc.process import name_process

POLL_S = 0.1
GIVE_UP_S = 30.0
ORPHAN_STALL_S = 1.0
"""An orphaned loop stops after its current tick; one whose tick count has not moved for this long is stuck."""


@dataclass(frozen=True)
class OrphanWatchSpec:
    """What the watch needs (picklable): the real-time process, the run's status block and where its fields are."""
    rt_pid: int
    parent_pid: int
    status_values: object          # the shared array of hil.service.build.RunStatus
    ticks_index: int
    state_index: int
    running_state: float
    stall_timeout_s: float
    port_file: str | None


def run_orphan_watch(spec: OrphanWatchSpec) -> None:
    """Process target (see the module docstring)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    name_process("hil-orphanwatch")
    try:
        pidfd = os.pidfd_open(spec.rt_pid)
    except ProcessLookupError:
        return
    progress = Progress(spec)
    try:
        while os.getppid() == spec.parent_pid:
            if _exited(pidfd, POLL_S):
                return
            progress.update()
        if _stops_by_itself(pidfd, progress):
            return
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        _exited(pidfd, 5.0)
        if spec.port_file:
            with contextlib.suppress(OSError):
                os.unlink(spec.port_file)
    finally:
        os.close(pidfd)


class Progress:
    """How long the loop's tick count has not moved while it runs (0 while it warms up or finishes)."""

    def __init__(self, spec: OrphanWatchSpec) -> None:
        self.spec, self.values = spec, spec.status_values
        self.last_ticks, self.last_change = self.values[spec.ticks_index], time.monotonic()

    def update(self) -> float:
        """Seconds since the tick count last moved while the loop runs."""
        ticks, now = self.values[self.spec.ticks_index], time.monotonic()
        if ticks != self.last_ticks or self.values[self.spec.state_index] != self.spec.running_state:
            self.last_ticks, self.last_change = ticks, now
        return now - self.last_change


def _exited(pidfd: int, timeout_s: float) -> bool:
    """Whether the process has exited, waiting up to ``timeout_s`` (a pidfd turns readable when it exits)."""
    return bool(select.select([pidfd], [], [], timeout_s)[0])


def _stops_by_itself(pidfd: int, progress: Progress) -> bool:
    """Wait for an orphaned real-time process to exit; False when its loop has not ticked for ORPHAN_STALL_S
    (or the stall timeout, if shorter), or it is still there after GIVE_UP_S."""
    limit = min(progress.spec.stall_timeout_s, ORPHAN_STALL_S)
    give_up = time.monotonic() + GIVE_UP_S
    while time.monotonic() < give_up:
        if _exited(pidfd, POLL_S):
            return True
        if progress.update() > limit:
            return False
    return False
