"""The other end of ``hil bench link``: controller peers and the floor without the HIL.

A peer is an external controller process written against the wire protocol only (:func:`can_peer`:
python-can + cantools; :func:`serial_peer`: pyserial + the ScienceMode2 frame format). It answers every
feedback set (tick k) at once with a stimulation command carrying a rolling counter; the HIL echoes the
counter of the newest command it applied, and :class:`RoundTrips` pairs sends with echoes. The
:func:`baseline_responder` stands in for the whole HIL with the link's own endpoint code, to measure what
transport, link code and scheduling alone give. Each runs in its own process (spawned, so the functions
are module-level).
"""
from __future__ import annotations

import collections
import math
import os
import select
import time

import numpy as np

from drivers.can.driver import CanEndpoint
from drivers.core.contract import frame_dtype
from drivers.ipc.link import INBOUND_AUX_WORDS, INBOUND_CAPACITY, LINK_RECORD, Inbound, feedback_dtype
from drivers.ipc.link_process import link_scheduling
from drivers.ipc.shm_ring import ShmRing
from drivers.stimulators.p24.driver import P24Endpoint
from drivers.stimulators.rehastim2.codec import (
    AMBIGUOUS_COUNTERS,
    CMD_INIT,
    CMD_INIT_ACK,
    CMD_INIT_CLM,
    CMD_START_CLM,
    FrameParser,
    encode_frame,
)
from drivers.stimulators.rehastim2.driver import ScienceModeEndpoint
from drivers.stimulators.sensor_stream import SensorStreamReader
from hil.service.build import write_port_file

STIM_CHANNEL = 4          # biceps in the default map
AMPLITUDES_MA = [10.0 + (k % 20) for k in range(256)]


class RoundTrips:
    """Pending commands by counter; an echo completes every command up to and including it."""

    def __init__(self) -> None:
        self.pending: collections.deque = collections.deque()
        self.samples: list[float] = []
        self.tick_delays: list[int] = []
        self.sent = 0
        self.unanswered = 0
        self.last_tick = None
        self.feedback = 0
        self.lost = 0

    def sent_now(self, counter: int, t: float, trigger_tick: int) -> None:
        self.pending.append((counter, t, trigger_tick))
        self.sent += 1
        while self.pending and t - self.pending[0][1] > 1.0:
            self.pending.popleft()
            self.unanswered += 1

    def echo(self, counter: int, t: float, tick: int) -> None:
        if not any(c == counter for c, _, _ in self.pending):
            return
        while self.pending:
            c, t_sent, trigger = self.pending.popleft()
            self.samples.append(t - t_sent)
            self.tick_delays.append(tick - trigger)
            if c == counter:
                break

    def tick(self, tick: int) -> bool:
        """Count a feedback frame; True if it is a new tick (the controller's cue to act)."""
        if self.last_tick is not None and tick <= self.last_tick:
            return False
        self.feedback += 1
        if self.last_tick is not None and tick > self.last_tick + 1:
            self.lost += tick - self.last_tick - 1
        self.last_tick = tick
        return True

    def summary(self) -> dict:
        s = np.array(self.samples) * 1e3
        pct = (lambda p: float(np.percentile(s, p))) if s.size else (lambda p: math.nan)
        d = np.array(self.tick_delays)
        return {"commands_sent": self.sent, "round_trips": int(s.size),
                "unanswered": self.unanswered + len(self.pending),
                "rtt_p50_ms": pct(50), "rtt_p99_ms": pct(99), "rtt_max_ms": float(s.max()) if s.size else math.nan,
                "applied_next_tick_percent": float(100.0 * np.mean(d == 1)) if d.size else math.nan,
                "feedback_frames": self.feedback, "lost_frames": self.lost}


def _controller_scheduling() -> None:
    """The peer runs like a real-time controller on its own machine as far as this one allows:
    SCHED_FIFO 60 (below the loop and the link) and off the loop's CPU (the last one) where permitted."""
    n = os.cpu_count() or 1
    link_scheduling(60, n - 1 if n > 1 else None)


def can_peer(group: str, dbc: str, duration_s: float, out, feedback: tuple[str, ...] = ("HIL_Status",)) -> None:
    """A CAN controller: python-can udp_multicast + cantools only. It acts on complete feedback sets, as
    a controller that needs the joint angles must: the first message (``HIL_Status`` or ``HIL_SensorFD``)
    gives the tick and the echo counter, the set is complete with the last frame of the last message
    (its highest block), and that is when the peer times the echo and sends its command."""
    _controller_scheduling()
    import can
    import cantools
    db = cantools.database.load_file(dbc)
    stim = db.get_message_by_name("FES_StimCmd")
    status = db.get_message_by_name(feedback[0])
    last = db.get_message_by_name(feedback[-1])
    last_block = max(b for sig in last.signals for b in (sig.multiplexer_ids or ())) if last.is_multiplexed() else None
    frames = [can.Message(arbitration_id=stim.frame_id, is_extended_id=False, data=stim.encode(dict(
        channel=STIM_CHANNEL, mode=0, enable=1, counter=c, pulse_width=200, amplitude=AMPLITUDES_MA[c],
        frequency=40))) for c in range(256)]
    bus = can.Bus(interface="udp_multicast", channel=group)
    rt = RoundTrips()
    try:
        t_wait = time.monotonic() + 60
        while time.monotonic() < t_wait:
            msg = bus.recv(0.5)
            if msg is not None and msg.arbitration_id == status.frame_id:
                break
        else:
            out.put({"error": f"no {feedback[0]} within 60 s"})
            return
        counter = 1       # echo_counter is 0 before the first command: start at 1 so 0 matches nothing
        pending = None    # (tick, echo counter) of the set being received
        t_end = time.monotonic() + duration_s
        while time.monotonic() < t_end:        # closed loop: one command in answer to every feedback set
            msg = bus.recv(0.5)
            if msg is None:
                continue
            if msg.arbitration_id == status.frame_id:
                values = status.decode(msg.data)
                pending = (values["tick"], values["echo_counter"])
            if pending is None or msg.arbitration_id != last.frame_id:
                continue
            if last_block is not None:
                values = last.decode(msg.data)
                if values["block"] != last_block or values["tick8"] != pending[0] & 0xFF:
                    continue
            now = time.monotonic()
            tick, echo = pending
            pending = None
            rt.echo(echo, now, tick)
            if rt.tick(tick):
                t_command = time.monotonic()
                bus.send(frames[counter])
                rt.sent_now(counter, t_command, tick)
                counter = (counter + 1) % 256
    finally:
        bus.shutdown()
    out.put(rt.summary())


def serial_peer(stim_port: str, sensor_port: str, duration_s: float, out) -> None:
    """A ScienceMode2 controller written against the frame format (pysciencemode cannot update at 1 kHz:
    it waits for every acknowledgement by spinning), reading the sensor stream."""
    _controller_scheduling()
    import serial

    stim = serial.Serial(stim_port, timeout=0)
    sensors = serial.Serial(sensor_port, timeout=0)
    parser, reader, rt = FrameParser(), SensorStreamReader(), RoundTrips()
    counters = [c for c in range(256) if c not in AMBIGUOUS_COUNTERS]
    starts = {c: encode_frame(c, CMD_START_CLM, bytes([0, 0, 200, int(AMPLITUDES_MA[c])])) for c in counters}
    acks = 0
    try:
        init = None
        t_wait = time.monotonic() + 60
        while init is None and time.monotonic() < t_wait:
            select.select([stim.fileno()], [], [], 0.5)
            init = next((f for f in parser.feed(stim.read(4096)) if f.command == CMD_INIT), None)
        if init is None:
            out.put({"error": "no Init within 60 s"})
            return
        stim.write(encode_frame(init.counter, CMD_INIT_ACK, b"\x00"))
        # channel list: the stimulation channel only, 25 ms main interval
        stim.write(encode_frame(1, CMD_INIT_CLM, bytes([0, 1 << (STIM_CHANNEL - 1), 0, 1, 0, 48, 0])))
        k = 0
        t_end = time.monotonic() + duration_s
        fds = [stim.fileno(), sensors.fileno()]
        while time.monotonic() < t_end:        # closed loop: one command in answer to every sensor frame
            readable, _, _ = select.select(fds, [], [], 0.5)
            if stim.fileno() in readable:
                acks += len(parser.feed(stim.read(4096)))
            if sensors.fileno() not in readable:
                continue
            now = time.monotonic()
            newest = None
            for echo, frame in reader.feed(sensors.read(65536)):
                tick = int(frame["tick"])
                rt.echo(echo, now, tick)
                if rt.tick(tick):
                    newest = tick
            if newest is not None:
                c = counters[k % len(counters)]
                t_command = time.monotonic()
                stim.write(starts[c])
                rt.sent_now(c, t_command, newest)
                k += 1
    finally:
        stim.close()
        sensors.close()
    out.put({**rt.summary(), "replies": acks, "stream_crc_errors": reader.crc_errors})


LINK_PRIORITY = 70          # the bench's links: the default, 10 below the loop's SCHED_FIFO 80


def baseline_responder(transport: str, endpoint_args: dict, rate_hz: float, duration_s: float, port_file: str,
                       out, stop) -> None:
    """The floor without the HIL: the link's own endpoint code on the same transport, in one process with
    the link's scheduling (SCHED_FIFO 70, off the loop's CPU), answering on its own clock.

    Every period it sends a feedback set for a constant sensor frame that echoes the newest command it
    decoded before the deadline, exactly as the loop would echo the command it applied; between deadlines
    it receives commands as the link does. Missing: the loop process, its compute time, the shared-memory
    hop and the wake-up of the link. A run of :func:`hil.bench.link.run_link_bench` minus this one is what the HIL
    adds. It answers for ``duration_s``, or until ``stop`` (an event) is set."""
    n = os.cpu_count() or 1
    link_scheduling(LINK_PRIORITY, n - 1 if n > 1 else None)
    if transport == "can":
        endpoint_cls = CanEndpoint
    elif transport.startswith("p24"):
        endpoint_cls = P24Endpoint
    else:
        endpoint_cls = ScienceModeEndpoint
    ring = ShmRing.create(LINK_RECORD, INBOUND_CAPACITY, INBOUND_AUX_WORDS)
    endpoint = None
    try:
        inbound = Inbound(ring)
        endpoint = endpoint_cls(**endpoint_args)
        ports = endpoint.open()
        endpoint.inbound = inbound
        fd = endpoint.fileno()
        records = np.zeros(INBOUND_CAPACITY, LINK_RECORD)
        feedback = np.zeros(1, feedback_dtype(frame_dtype()))
        feedback["echo_seq"] = -1
        period = 1.0 / rate_hz
        lateness = np.zeros(int((duration_s + 10.0) * rate_hz))
        write_port_file({"0:baseline": ports}, port_file)
        t0 = time.monotonic()
        t_next, t_end, t_periodic, tick = t0 + period, t0 + duration_s, t0, 0
        while tick < lateness.size:
            now = time.monotonic()
            if now < t_next:                  # between deadlines: take commands as the link does
                if select.select([fd], [], [], t_next - now)[0]:
                    endpoint.receive(inbound, 0.0)
                continue
            if now >= t_end or stop.is_set():
                break
            lateness[tick] = now - t_next
            k = ring.pop_into(records)
            valid = records["seq"][:k][records["seq"][:k] >= 0]        # rejects are counted, not pushed
            if valid.size:
                feedback["echo_seq"] = valid[-1]
            feedback["frame"]["tick"] = tick
            endpoint.send_feedback(feedback, ring.aux)
            if now >= t_periodic:
                endpoint.periodic(inbound)
                t_periodic = now + endpoint.poll_interval_s
            tick += 1
            t_next += period
        late = lateness[:tick] * 1e6
        out.put({"ok": True, "ticks": tick, "lateness_us": {"p99": float(np.percentile(late, 99)) if tick else None,
                                                           "max": float(late.max()) if tick else None}})
    except Exception as exc:   # reported by run_link_bench
        out.put({"ok": False, "error": f"baseline responder: {type(exc).__name__}: {exc}"})
    finally:
        if endpoint is not None:
            endpoint.close()
        ring.close()
        ring.release()
