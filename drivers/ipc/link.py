"""External transports run their blocking I/O in a link process, never in the real-time process.

Platform facts: on CPython the GIL, not the sleep, breaks deadlines, so a thread that blocks on a serial
port or a CAN socket, parses, decodes with cantools or spin-waits must not share
the interpreter lock with the tick. A :class:`LinkDriver` (the loop side, a :class:`drivers.core.interface.Driver`)
therefore starts one **link process** per transport and talks to it through shared memory only:

    link process                                   real-time process
    ------------                                   -----------------
    read, decode, validate             --->  inbound ShmRing (LINK_RECORD)   ---> fetch(): sink calls
    encode, write feedback             <---  outbound ShmRing (echo + frame) <--- publish() + wake byte

  The link process's side is :mod:`drivers.ipc.link_process` (its target, scheduling and I/O loops) with
  :mod:`drivers.ipc.link_endpoint` (the records, the inbound writer and the transport's endpoint): one
  thread serves both directions with ``select`` on the wake socket and the transport's descriptor
  (serial ptys/ttys, SocketCAN, udp_multicast), feedback first; a transport without a descriptor gets a
  receiver thread that blocks in it while the main thread sends.

- Inbound records are already parsed and validated at the transport level (checksums, lengths, ids,
  counters). A malformed frame is not a record: the link counts it by reason in the inbound ring's aux
  words (one counter per REJECT_REASONS entry and a total written last), and ``fetch`` hands the loop
  only the counts that grew since its last look, one sink call per reason. A garbage flood thus costs
  the loop one load per tick, and a few calls on ticks with new rejects; the counts are logged and
  recorded losslessly. Stimulation limits, latching and the watchdog stay in the loop
  (:class:`hil.rt.engine.TickEngine`).
- ``publish`` copies the sensor frame into the outbound ring and sends one byte on a non-blocking
  datagram socket pair to wake the link's main thread (one syscall; dropped and counted if the link
  is gone or behind). The frame carries ``echo_seq``, the transport sequence number of the newest
  command this driver handed to the loop, so a controller can measure its round trip.
- The link endpoint writes its state into the inbound ring's ``aux`` words: connected, frames received,
  frames sent, send errors, and the reject counts.
- The link process exits when the outbound ring is closed (driver shutdown) or its parent dies
  (PR_SET_PDEATHSIG, and a parent check). A link process that dies is noticed by the real-time process
  between ticks (:meth:`LinkDriver.check_alive`); the next fetch reports it to the loop's sink, which sets
  what the driver latched to zero and logs the event, so a replay does the same at the same tick.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import socket
from dataclasses import dataclass

import numpy as np

from drivers.core.contract import KIND_CHANNEL, KIND_EXCITATION, KIND_HEARTBEAT, REJECT_REASONS
from drivers.core.interface import CommandSink, Driver, DriverInitializationError
from drivers.ipc.link_endpoint import (
    AUX_CONNECTED,
    AUX_FRAMES_IN,
    AUX_FRAMES_OUT,
    AUX_REJECT_BASE,
    AUX_REJECTS_TOTAL,
    AUX_SEND_ERRORS,
    INBOUND_AUX_WORDS,
    INBOUND_CAPACITY,
    LINK_RECORD,
    OUTBOUND_CAPACITY,
    Inbound,
    LinkEndpoint,
    feedback_dtype,
    reject_counts,
)
from drivers.ipc.link_process import run_link
from drivers.ipc.process import HelperStartError, start_helper, stop_process
from drivers.ipc.shm_ring import ShmRing
from sim.config_schema import Derived, Key

#: the names of :mod:`drivers.ipc.link_endpoint` a transport needs, here too: a transport imports one module
__all__ = ["AUX_CONNECTED", "AUX_FRAMES_IN", "AUX_FRAMES_OUT", "AUX_REJECT_BASE", "AUX_REJECTS_TOTAL",
           "AUX_SEND_ERRORS", "INBOUND_AUX_WORDS", "INBOUND_CAPACITY", "KIND_CHANNEL", "KIND_EXCITATION",
           "KIND_HEARTBEAT", "LINK_RECORD", "MAX_RECORDS_PER_FETCH", "OUTBOUND_CAPACITY", "Inbound", "LinkDriver",
           "LinkEndpoint", "LinkSpec", "feedback_dtype", "link_scheduling_keys", "reject_counts"]

#: The same bytes as :data:`LINK_RECORD` with the four values as scalar fields: ``.item(i)`` of a view
#: with this dtype gives one tuple of Python numbers per record (one numpy call instead of one per field).
_LINK_RECORD_FLAT = np.dtype({
    "names": ["receive_ns", "seq", "kind", "index", "v0", "v1", "v2", "v3"],
    "formats": ["<i8", "<i4", "u1", "<i2", "<f8", "<f8", "<f8", "<f8"],
    "offsets": [LINK_RECORD.fields[f][1] for f in ("receive_ns", "seq", "kind", "index")]
    + [LINK_RECORD.fields["values"][1] + 8 * k for k in range(4)],
    "itemsize": LINK_RECORD.itemsize})

MAX_RECORDS_PER_FETCH = 512


@dataclass(frozen=True)
class LinkSpec:
    """A link driver's parsed config: its endpoint's keyword arguments (picklable, they cross into the link
    process) and the link process's scheduling."""
    endpoint_args: dict
    priority: int | None
    loop_cpu: int | None


#: ``priority`` of a link driver's table; its default depends on the loop's scheduling (given when read).
PRIORITY_KEY = Key("priority", "integer",
                   Derived("max(1, loop priority - 10) when the loop runs SCHED_FIFO, else 0", lambda read: None),
                   "SCHED_FIFO priority of the link process (0: normal scheduling); below the loop's", lo=0, hi=99)


def link_scheduling_keys(table, ctx) -> tuple[int | None, int | None]:
    """(priority, loop CPU) of a link from its driver table (a :class:`drivers.core.config_table.ConfigTable`;
    :data:`PRIORITY_KEY`, its default computed here) and the loop's scheduling in the driver context."""
    default = max(1, ctx.loop_priority - 10) if ctx.loop_sched_fifo else 0
    priority = table.key(PRIORITY_KEY, default=default)
    if ctx.loop_sched_fifo and priority >= ctx.loop_priority:
        raise table.error("priority", f"must be below the loop's priority {ctx.loop_priority}")
    return priority or None, ctx.loop_cpu


class LinkDriver(Driver):
    """Loop side of a transport whose I/O runs in a link process (see the module docstring)."""

    name = "link"

    #: records one fetch takes from the inbound ring at most
    fetch_records = MAX_RECORDS_PER_FETCH

    def __init__(self, endpoint_cls: type[LinkEndpoint], endpoint_args: dict, frame_dtype: np.dtype,
                 index: int = 0, start_timeout_s: float = 30.0, priority: int | None = None,
                 loop_cpu: int | None = None, group_names: tuple[str, ...] = (),
                 out_dtype: np.dtype | None = None) -> None:
        """``out_dtype``: the outbound record (default :func:`feedback_dtype`; a subclass that fills its own
        record sends it with :meth:`_send_out`)."""
        self._proc = None
        self.group_names = tuple(group_names)   # muscle groups by the index a group record carries
        self._in = ShmRing.create(LINK_RECORD, INBOUND_CAPACITY, INBOUND_AUX_WORDS)
        self._out_rec = np.zeros(1, feedback_dtype(frame_dtype) if out_dtype is None else out_dtype)
        self._outring = ShmRing.create(self._out_rec.dtype, OUTBOUND_CAPACITY)
        self._wake, far = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._wake.setblocking(False)
        args = (endpoint_cls, endpoint_args, self._in.name, self._outring.name, self._out_rec.dtype.descr, far,
                os.getpid(), priority, loop_cpu)
        try:
            self._proc, info, pipe = start_helper(mp.get_context("spawn"), run_link, args, f"hil-link-{index}",
                                                  f"{endpoint_cls.__name__}: the link process", start_timeout_s)
            pipe.close()
        except HelperStartError as exc:
            self._stop_link()
            raise DriverInitializationError(str(exc)) from None
        except BaseException:
            self._stop_link()
            raise
        finally:
            far.close()               # the link process has its own copy
        self.ports: dict[str, str] = dict(info)
        self._buf = np.zeros(self.fetch_records, LINK_RECORD)
        self._flat = self._buf.view(_LINK_RECORD_FLAT)
        self._rejects_total_seen = 0
        self._reject_counts = np.zeros(len(REJECT_REASONS), np.uint64)
        self._reject_seen = np.zeros(len(REJECT_REASONS), np.uint64)
        self.echo_seq = -1
        self.wake_errors = 0
        self.lost = False                # the link process died (check_alive)
        self._loss_reported = False
        super().__init__(index)

    def max_log_entries(self, largest_group: int) -> int:
        """A fetch hands over at most MAX_RECORDS_PER_FETCH records, each a group of up to
        ``largest_group`` elements when the transport has groups, plus one entry per reject reason and
        one for a lost link."""
        per_record = max(1, largest_group) if self.group_names else 1
        return MAX_RECORDS_PER_FETCH * per_record + len(REJECT_REASONS) + 1

    # -- loop side ---------------------------------------------------------------------------
    def fetch(self, tick: int, now_ns: int, sink: CommandSink) -> None:
        self._report_link(now_ns, sink)
        n = self._in.pop_into(self._buf)
        self._hand_over(0, n, sink)
        self.frames_received += n

    def _report_link(self, now_ns: int, sink: CommandSink) -> None:
        """A lost link (once) and the reject counts that grew, to the sink."""
        if self.lost and not self._loss_reported:
            self._loss_reported = True
            sink.driver_lost(self.index, now_ns)
        if self._in.aux[AUX_REJECTS_TOTAL] != self._rejects_total_seen:
            self._hand_over_rejects(now_ns, sink)

    def _hand_over(self, lo: int, hi: int, sink: CommandSink) -> None:
        """Records ``lo:hi`` of the fetch buffer to the sink, in order."""
        d, flat = self.index, self._flat
        for i in range(lo, hi):
            ns, seq, kind, index, v0, v1, v2, v3 = flat.item(i)
            if kind == KIND_CHANNEL:
                ok = sink.channel(d, ns, index, v0, v1, v2, int(v3))
            elif kind == KIND_EXCITATION:
                if index >= 0:
                    ok = sink.excitation(d, ns, index, v0)
                elif -1 - index < len(self.group_names):
                    ok = sink.group_excitation(d, ns, self.group_names[-1 - index], v0)
                else:
                    sink.reject(d, ns, "unknown_muscle")
                    ok = False
            else:
                sink.heartbeat(d, ns)
                ok = True
            if ok and seq >= 0:
                self.echo_seq = seq

    def _hand_over_rejects(self, now_ns: int, sink: CommandSink) -> None:
        """The reject counts that grew since the last look, one sink call per reason."""
        aux = self._in.aux
        self._rejects_total_seen = aux[AUX_REJECTS_TOTAL]     # before the counts: a later reject shows next time
        np.copyto(self._reject_counts, aux[AUX_REJECT_BASE:])
        for r in np.flatnonzero(self._reject_counts != self._reject_seen):
            sink.rejects(self.index, now_ns, REJECT_REASONS[r], int(self._reject_counts[r] - self._reject_seen[r]))
        np.copyto(self._reject_seen, self._reject_counts)

    def check_alive(self) -> bool:
        """Whether the link process still runs (a syscall: call between ticks, not in one). A dead link
        is reported to the loop's sink at the next fetch."""
        if not self.lost and not self.link_alive:
            self.lost = True
        return not self.lost

    def publish(self, frame: np.ndarray) -> None:
        rec = self._out_rec[0]
        rec["echo_seq"] = self.echo_seq
        rec["frame"] = frame[0]
        self._send_out()

    def _send_out(self) -> None:
        """The outbound record to the link: into the ring, and one wake-up byte."""
        if not self._outring.push(self._out_rec):
            self.publish_dropped += 1
            return
        self.frames_published += 1
        try:
            self._wake.send(b"\0")
        except OSError:   # link behind (socket buffer full) or gone: the ring still holds the frame
            self.wake_errors += 1

    def connected(self) -> bool:
        return not self.lost and bool(self._in.aux[AUX_CONNECTED])

    @property
    def link_alive(self) -> bool:
        return self._proc is not None and self._proc.is_alive()

    @property
    def stats(self) -> dict:
        s = super().stats
        aux = self._in.aux
        s.update(link_frames_in=int(aux[AUX_FRAMES_IN]), link_frames_out=int(aux[AUX_FRAMES_OUT]),
                 link_send_errors=int(aux[AUX_SEND_ERRORS]), link_rejects=int(aux[AUX_REJECTS_TOTAL]),
                 inbound_dropped=self._in.dropped, wake_errors=self.wake_errors, connected=self.connected(),
                 link_alive=not self.lost)
        if self.lost:
            s["link_exit_code"] = None if self._proc is None else self._proc.exitcode
        return s

    def end_feed(self) -> None:
        """The run is over: close the outbound ring now, so that the link, which ends when it sees the ring
        closed, never takes the wait for other drivers' shutdowns for a stalled loop."""
        self._outring.close()

    def _stop_link(self) -> None:
        self._outring.close()
        try:
            self._wake.send(b"\0")
        except OSError:
            pass
        stop_process(self._proc, 3.0)
        self._wake.close()
        self._in.release()
        self._outring.release()

    def _shutdown(self) -> None:
        self._stop_link()

