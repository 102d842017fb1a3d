"""``hil bench link``: round trip through a real transport, measured by an external controller process.

The service runs in its own real-time process (as ``hil run``) with one CAN or ScienceMode2 driver; a
peer controller process (this module's :func:`can_peer` / :func:`serial_peer`, written against the wire
protocol only: python-can + cantools, or pyserial + the ScienceMode2 frame format) closes the loop: it
answers every feedback set (tick k) at once with a stimulation command carrying a rolling counter. The
HIL echoes the counter of the newest command it applied (``HIL_Status.echo_counter`` / the sensor
stream's ``echo_seq``), so

    round trip = time the feedback echoing command c arrives - time command c was sent

A command that reaches the loop before the next deadline is applied at tick k + 1 and its round trip is
about one tick; one that misses it costs a tick more (``applied_next_tick_percent`` counts the good
ones). Lost frames are gaps in the tick sequence of the feedback the peer received.
"""
from __future__ import annotations

import collections
import json
import math
import multiprocessing as mp
import os
import queue
import random
import select
import tempfile
import time
from pathlib import Path

import numpy as np

from drivers.link import link_scheduling

CONFIG = """
[loop]
period_ms = {period_ms}
substeps = {substeps}
{cpu_line}
[safety]
watchdog_timeout_ms = {watchdog_ms}
[metrics]
enabled = false
[recording]
enabled = false
"""

CAN_DRIVER = """
[[driver]]
type = "can"
interface = "udp_multicast"
channel = "{group}"
dbc = "{dbc}"
feedback = {feedback}
"""
#: CAN feedback sets. The full set is 14 frames a tick: 3500 frames/s (~0.46 Mbit/s) at 250 Hz but
#: ~1.8 Mbit/s at 1 kHz, more than a 1 Mbit/s CAN bus carries. "auto" sends the full set up to 250 Hz and
#: the status frame above: over python-can's udp_multicast every frame costs ~30 µs of Python in the
#: link and in the peer (and each receives its own sends), which at 1 kHz on the 2-vCPU VM leaves no
#: room for more (README "Link latency" has the figures for status + joint angles).
FEEDBACK_SETS = {"status": ["HIL_Status"], "angles": ["HIL_Status", "HIL_JointAngle"],
                 "full": ["HIL_Status", "HIL_JointAngle", "HIL_JointVelocity", "HIL_Arm", "HIL_Force"],
                 "fd": ["HIL_SensorFD"]}


def feedback_set(choice: str, rate_hz: float) -> list[str]:
    if choice == "auto":
        choice = "full" if rate_hz <= 250 else "status"
    return FEEDBACK_SETS[choice]

SERIAL_DRIVER = """
[[driver]]
type = "sciencemode2"
port = "pty"
sensor_port = "pty"
"""

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
        return {"commands_sent": self.sent, "round_trips": int(s.size), "unanswered": self.unanswered + len(self.pending),
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

    from drivers.sciencemode2 import (_AMBIGUOUS_COUNTERS, CMD_INIT, CMD_INIT_ACK, CMD_INIT_CLM, CMD_START_CLM,
                                      FrameParser, encode_frame)
    from drivers.sensor_stream import SensorStreamReader
    stim = serial.Serial(stim_port, timeout=0)
    sensors = serial.Serial(sensor_port, timeout=0)
    parser, reader, rt = FrameParser(), SensorStreamReader(), RoundTrips()
    counters = [c for c in range(256) if c not in _AMBIGUOUS_COUNTERS]
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
                       out) -> None:
    """The floor without the HIL: the link's own endpoint code on the same transport, in one process with
    the link's scheduling (SCHED_FIFO 70, off the loop's CPU), answering on its own clock.

    Every period it sends a feedback set for a constant sensor frame that echoes the newest command it
    decoded before the deadline, exactly as the loop would echo the command it applied; between deadlines
    it receives commands as the link does. Missing: the loop process, its compute time, the shared-memory
    hop and the wake-up of the link. A run of :func:`run_link_bench` minus this one is what the HIL adds."""
    from drivers.link import INBOUND_AUX_WORDS, INBOUND_CAPACITY, LINK_RECORD, Inbound, feedback_dtype
    from hil.sensor import frame_dtype
    from hil.service import write_port_file
    from hil.shm_ring import ShmRing
    n = os.cpu_count() or 1
    link_scheduling(LINK_PRIORITY, n - 1 if n > 1 else None)
    if transport == "can":
        from drivers.can import CanEndpoint as endpoint_cls
    else:
        from drivers.serial_stim import ScienceModeEndpoint as endpoint_cls
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
            if now >= t_end:
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


def udp_receive_buffer_errors() -> int | None:
    """Datagrams the kernel dropped because a UDP socket's receive buffer was full (all sockets of the
    machine: ``RcvbufErrors`` in /proc/net/snmp); None where not available."""
    try:
        lines = [line.split() for line in Path("/proc/net/snmp").read_text().splitlines() if line.startswith("Udp:")]
        return int(lines[1][lines[0].index("RcvbufErrors")])
    except (OSError, IndexError, ValueError):
        return None


def run_link_bench(transport: str, rate_hz: float, duration_s: float, feedback: str = "auto",
                   baseline: bool = False) -> dict:
    """One measurement: service at ``rate_hz`` with the transport, the peer for ``duration_s``; with
    ``baseline`` the :func:`baseline_responder` instead of the service."""
    from hil.config import min_substeps
    from hil.supervisor import ServiceRun
    period = 1.0 / rate_hz
    work = Path(tempfile.mkdtemp(prefix="hil-bench-link-"))
    cpu = os.cpu_count() or 1
    text = CONFIG.format(period_ms=period * 1e3, substeps=min_substeps(period),
                         cpu_line=f"cpu = {cpu - 1}" if cpu > 1 else "",
                         watchdog_ms=2500 if transport == "serial" else 500)
    root = Path(__file__).resolve().parents[1]
    group = f"239.76.{random.randint(1, 250)}.{random.randint(1, 250)}"
    if transport == "can":
        messages = feedback_set(feedback, rate_hz)
        text += CAN_DRIVER.format(group=group, dbc=root / "configs" / "fes-hil.dbc", feedback=json.dumps(messages))
    else:
        text += SERIAL_DRIVER
    cfg = work / "bench.toml"
    cfg.write_text(f'include = ["{root / "configs" / "stimulation-default.toml"}"]\n' + text)
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    service_run = None
    port_file = work / "ports.json"
    if baseline:
        if transport == "can":
            from sim.model import load_model
            args = dict(interface="udp_multicast", channel=group, dbc_path=str(root / "configs" / "fes-hil.dbc"),
                        muscle_names=list(load_model().muscle_names), feedback=tuple(feedback_set(feedback, rate_hz)))
        else:
            args = dict(port="pty", sensor_port="pty", channel_map=list(range(8)), client_timeout_s=2.5)
        rt_proc = ctx.Process(target=baseline_responder, name="hil-bench-baseline",
                              args=(transport, args, rate_hz, duration_s + 4.0, str(port_file), results))
        rt_proc.start()
    else:
        service_run = ServiceRun(str(cfg), duration_s + 4.0, None, port_file)
        service_run.start()
        rt_proc, results = service_run.proc, service_run.results
    peer_out = ctx.Queue()
    peer = None
    try:
        t_wait = time.monotonic() + 180
        while not port_file.exists():
            if not rt_proc.is_alive() or time.monotonic() > t_wait:
                if rt_proc.is_alive():
                    return {"error": "the service did not announce its ports"}
                try:
                    return {"error": results.get(timeout=5).get("error", "no ports")}
                except queue.Empty:
                    return {"error": f"{rt_proc.name} exited (code {rt_proc.exitcode}) without a result"}
            time.sleep(0.05)
        ports = json.loads(port_file.read_text())
        p = next(iter(ports.values()))
        if transport == "can":
            peer = ctx.Process(target=can_peer, args=(group, str(root / "configs" / "fes-hil.dbc"), duration_s,
                                                      peer_out, tuple(feedback_set(feedback, rate_hz))),
                               name="bench-peer")
        else:
            peer = ctx.Process(target=serial_peer, args=(p["stimulator"], p["sensors"], duration_s, peer_out),
                               name="bench-peer")
        udp_overflows = udp_receive_buffer_errors()
        peer.start()
        peer_result = peer_out.get(timeout=duration_s + 120)
        if udp_overflows is not None:
            after = udp_receive_buffer_errors()
            udp_overflows = None if after is None else after - udp_overflows
        summary = results.get(timeout=duration_s + 120)
    finally:
        if peer is not None:
            peer.join(10)
        rt_proc.join(30)
        if service_run is not None:
            service_run.close()
    if not summary.get("ok"):
        return {"error": summary.get("error")}
    lat = summary["lateness_us"]
    common = {"transport": transport, "rate_hz": rate_hz, "duration_s": duration_s,
              "feedback": feedback_set(feedback, rate_hz) if transport == "can" else ["sensor stream (full frame)"],
              **peer_result, "goal_rtt_p99_ms": (period + 0.5e-3) * 1e3}
    if baseline:
        return {**common, "baseline": True, "responder_lateness_p99_us": lat["p99"],
                "responder_lateness_max_us": lat["max"]}
    return {**common,
            "loop_lateness_p99_us": lat.get("p99"), "loop_lateness_max_us": lat.get("max"),
            "deadline_misses": summary["deadline_misses"], "commands_rejected": summary["commands_rejected"],
            # where lost frames went: not sent by the HIL (ring full, send error; over the whole run, so for
            # serial including the frames a sensor pty could not take before the peer opened it), or dropped
            # by the kernel because a receiving socket was full (machine-wide; over udp_multicast the peer's)
            "hil_frames_not_sent": sum(d.get("publish_dropped", 0) + d.get("link_send_errors", 0)
                                       for d in summary["drivers"].values()),
            "udp_receive_buffer_overflows": udp_overflows if transport == "can" else None,
            "realtime": summary["realtime"]["sched_fifo"] and summary["realtime"]["mlock"]}
