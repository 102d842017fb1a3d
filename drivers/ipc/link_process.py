"""The link process: the transport side of a :class:`drivers.ipc.link.LinkDriver`, in its own process.

:func:`run_link` is the process target the driver starts. It ignores SIGINT (the supervisor decides),
asks for the parent-death signal, sets its scheduling (:func:`link_scheduling`: SCHED_FIFO below the loop,
every CPU but the loop's), attaches the inbound and outbound rings of :mod:`drivers.ipc.link_endpoint` and opens
its :class:`drivers.ipc.link_endpoint.LinkEndpoint`, reporting start-up errors to the driver through the pipe. Then one
thread serves both directions with ``select`` on the wake socket and the transport's descriptor (serial
ptys/ttys, SocketCAN, udp_multicast), feedback first; a transport without a descriptor gets a receiver
thread that blocks in it while the main thread sends. It exits when the outbound ring is closed (driver
shutdown) or its parent is gone.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import select
import socket
import sys
import threading
import time

import numpy as np

from drivers.ipc.link_endpoint import (
    AUX_CONNECTED,
    INBOUND_AUX_WORDS,
    INBOUND_CAPACITY,
    LINK_RECORD,
    OUTBOUND_CAPACITY,
    Inbound,
)
from drivers.ipc.process import die_with_parent
from drivers.ipc.shm_ring import ShmRing


def link_scheduling(priority: int | None, loop_cpu: int | None) -> list[str]:
    """SCHED_FIFO at ``priority`` (below the loop's) and every CPU but the loop's; warnings if refused.

    A link waits on I/O nearly all the time; with real-time priority it runs the moment a frame arrives
    instead of after the time slice of whatever else shares its CPU (README "Link latency")."""
    warnings = []
    if priority:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
        except (OSError, AttributeError) as exc:
            warnings.append(f"link SCHED_FIFO priority {priority} refused ({exc})")
    if loop_cpu is not None:
        others = set(range(os.cpu_count() or 1)) - {loop_cpu}
        if others:
            try:
                os.sched_setaffinity(0, others)
            except (OSError, AttributeError) as exc:
                warnings.append(f"link CPU affinity {sorted(others)} refused ({exc})")
    return warnings


def run_link(endpoint_cls, endpoint_args: dict, in_name: str, out_name: str, out_descr, wake: socket.socket,
              parent_pid: int, priority: int | None, loop_cpu: int | None, conn) -> None:
    """Target of the link process (started by :func:`drivers.ipc.process.start_helper`: answers on ``conn``)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)     # the supervisor decides; shutdown closes the ring
    signal.signal(signal.SIGTERM, signal.SIG_IGN)    # a stop of the whole process group too: the loop ends first
    if not die_with_parent(parent_pid, signal.SIGKILL, name=mp.current_process().name):
        return
    sys.setswitchinterval(2e-4)   # with a receiver thread: hand the GIL over within 0.2 ms, not 5 ms
    for w in link_scheduling(priority, loop_cpu):   # before the receiver thread starts: it inherits them
        print(f"hil link: warning: {w}", file=sys.stderr, flush=True)
    in_ring = out_ring = endpoint = None
    try:
        try:
            in_ring = ShmRing.attach(in_name, LINK_RECORD, INBOUND_CAPACITY, INBOUND_AUX_WORDS)
            out_ring = ShmRing.attach(out_name, np.dtype(out_descr), OUTBOUND_CAPACITY)
            endpoint = endpoint_cls(**endpoint_args)
            ports = endpoint.open()
        except Exception as exc:  # reported to the driver's constructor, which raises it
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
            return
        conn.send(("ready", ports))
        inbound = Inbound(in_ring)
        buf = np.zeros(OUTBOUND_CAPACITY, out_ring.dtype)
        fd = endpoint.fileno()
        if fd is not None:
            endpoint.inbound = inbound      # single thread: the endpoint may also receive while sending
        if fd is None:
            _thread_loop(endpoint, inbound, out_ring, buf, wake, parent_pid, in_ring.aux)
        else:
            _select_loop(endpoint, fd, inbound, out_ring, buf, wake, parent_pid, in_ring.aux)
    except Exception as exc:  # the loop goes on without this link: shown as disconnected, error on stderr
        print(f"hil link: stopped: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
    finally:
        if endpoint is not None:
            try:
                endpoint.close()
            except Exception:
                pass
        if in_ring is not None:
            in_ring.aux[AUX_CONNECTED] = 0
            in_ring.release()
        if out_ring is not None:
            out_ring.release()


FEED_STALL_S = 0.25
"""A loop that has not fed its link for this long has stalled (it feeds every tick, at most 10 ms apart;
``[safety] tick_stall_timeout_ms`` is at least this long)."""


class FeedWatch:
    """Zeroes what the transport shows (:meth:`drivers.ipc.link_endpoint.LinkEndpoint.feed_stopped`), once, when the loop
    stops feeding the link: a stalled loop cannot do it, and its last stimulation must not stay shown."""

    def __init__(self, endpoint) -> None:
        self.endpoint, self.last_fed, self.zeroed = endpoint, None, False

    def fed(self) -> None:
        self.last_fed, self.zeroed = time.monotonic(), False

    def check(self, now: float) -> None:
        if self.last_fed is not None and not self.zeroed and now - self.last_fed > FEED_STALL_S:
            self.zeroed = True
            self.endpoint.feed_stopped()


def _feedback(endpoint, out_ring, buf, aux, watch: FeedWatch) -> bool:
    """Send what the loop published; False once the loop has closed the ring. The closed flag is read
    before the records, so the records the loop pushed before closing it are still sent."""
    closed = out_ring.closed
    n = out_ring.pop_into(buf)
    if n:
        watch.fed()
        endpoint.send_feedback(buf[:n], aux)
    return not closed


def _select_loop(endpoint, fd, inbound, out_ring, buf, wake, parent_pid, aux) -> None:
    """One thread serves both directions: no GIL hand-over between a receiver and a sender thread.
    Feedback first when both are ready (the controller waits for it)."""
    wake.setblocking(False)
    wake_fd = wake.fileno()
    fds = [wake_fd, fd]
    next_periodic = 0.0
    watch = FeedWatch(endpoint)
    while True:
        readable, _, _ = select.select(fds, [], [], endpoint.poll_interval_s)
        if wake_fd in readable:
            try:
                while wake.recv(4096):
                    pass
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                break
            if not _feedback(endpoint, out_ring, buf, aux, watch):
                break
        if fd in readable:
            endpoint.receive(inbound, 0.0)
        now = time.monotonic()
        watch.check(now)
        if now >= next_periodic:
            endpoint.periodic(inbound)
            next_periodic = now + endpoint.poll_interval_s
            if os.getppid() != parent_pid:
                break


def _thread_loop(endpoint, inbound, out_ring, buf, wake, parent_pid, aux) -> None:
    """A receiver thread blocks in the transport; this thread sends the feedback."""
    stop = threading.Event()
    receiver = threading.Thread(target=_guard, args=(endpoint.receive_forever, inbound, stop),
                                name="link-receiver", daemon=True)
    receiver.start()
    wake.settimeout(FEED_STALL_S / 5)
    watch = FeedWatch(endpoint)
    while True:
        try:
            wake.recv(4096)
        except (socket.timeout, BlockingIOError):
            if os.getppid() != parent_pid:
                break
        except OSError:
            break
        if not _feedback(endpoint, out_ring, buf, aux, watch):
            break
        watch.check(time.monotonic())
    stop.set()
    receiver.join(2.0)


def _guard(target, inbound, stop) -> None:
    try:
        target(inbound, stop)
    except Exception as exc:  # the loop sees the link as disconnected; the error goes to stderr
        inbound.set_connected(False)
        print(f"hil link: receiver stopped: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
