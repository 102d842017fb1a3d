"""``hil bench link``: round trip through a real transport, measured by an external controller process.

The service runs in its own real-time process (as ``hil run``) with one CAN or ScienceMode2 driver; a
peer controller process (:mod:`hil.bench.peers`) closes the loop: it answers every feedback set (tick k)
at once with a stimulation command carrying a rolling counter. The HIL echoes the counter of the newest
command it applied (``HIL_Status.echo_counter`` / the sensor stream's ``echo_seq``), so

    round trip = time the feedback echoing command c arrives - time command c was sent

A command that reaches the loop before the next deadline is applied at tick k + 1 and its round trip is
about one tick; one that misses it costs a tick more (``applied_next_tick_percent`` counts the good
ones). Lost frames are gaps in the tick sequence of the feedback the peer received. Over LSL
(:mod:`hil.bench.lsl_peer`) the peer times command sample -> applied and tick -> outlet sample instead.
"""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import queue
import random
import tempfile
import time
from pathlib import Path

from drivers.can.local_bus import host_local_group
from hil.bench.lsl_peer import lsl_driver_table, lsl_peer, lsl_peer_name
from hil.bench.p24_peer import p24_peer
from hil.bench.peers import baseline_responder, can_peer, serial_peer
from hil.bench.platform import cpu_model, steal_delta_ms, steal_s, udp_receive_buffer_errors, unbound_workqueue_cpus
from hil.config import min_substeps
from hil.service.run_result import RunResult
from hil.service.supervisor import ServiceRun
from sim.das3.model import load_model

ROOT = Path(__file__).resolve().parents[2]
DBC = ROOT / "configs" / "fes-hil.dbc"
END_MARGIN_S = 4.0
"""The measured side runs this much longer than the peer (its start-up and the peer's): the longest it waits for
a peer that never reports; once the peer has, it is ended at once (:func:`_end_measured_side`)."""

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

SERIAL_DRIVER = """
[[driver]]
type = "sciencemode2"
port = "pty"
sensor_port = "pty"
"""

#: The emulated P24 (ScienceMode4): "p24-mid" answers with mid-level updates, "p24-low" with low-level pulses.
P24_TRANSPORTS = ("p24-mid", "p24-low")
P24_DRIVER = SERIAL_DRIVER.replace("sciencemode2", "sciencemode4")

#: CAN feedback sets. The full set is 14 frames a tick: 3500 frames/s (~0.46 Mbit/s) at 250 Hz but
#: ~1.8 Mbit/s at 1 kHz, more than a 1 Mbit/s CAN bus carries. "auto" sends the full set up to 250 Hz and
#: the status frame above: over python-can's udp_multicast every frame costs Python time in the link and in
#: the peer (and each receives its own sends), which at 1 kHz on a 2-vCPU machine leaves no room for more
#: (README "Link latency" has the figures for status + joint angles).
FEEDBACK_SETS = {"status": ["HIL_Status"], "angles": ["HIL_Status", "HIL_JointAngle"],
                 "full": ["HIL_Status", "HIL_JointAngle", "HIL_JointVelocity", "HIL_Arm", "HIL_Force"],
                 "fd": ["HIL_SensorFD"]}


def feedback_set(choice: str, rate_hz: float) -> list[str]:
    """The CAN messages sent every tick for a ``--feedback`` choice ("auto" depends on the rate)."""
    if choice == "auto":
        choice = "full" if rate_hz <= 250 else "status"
    return FEEDBACK_SETS[choice]


def _write_config(work: Path, transport: str, rate_hz: float, feedback: str, group: str) -> Path:
    """The service config of one measurement: the loop at ``rate_hz`` (on the last CPU) and the transport."""
    period = 1.0 / rate_hz
    cpu = os.cpu_count() or 1
    text = CONFIG.format(period_ms=period * 1e3, substeps=min_substeps(period),
                         cpu_line=f"cpu = {cpu - 1}" if cpu > 1 else "",
                         watchdog_ms=2500 if transport == "serial" or transport in P24_TRANSPORTS else 500)
    if transport == "can":
        messages = feedback_set(feedback, rate_hz)
        text += CAN_DRIVER.format(group=group, dbc=DBC, feedback=json.dumps(messages))
    elif transport in P24_TRANSPORTS:
        text += P24_DRIVER
    elif transport == "lsl":
        text += lsl_driver_table(work, lsl_peer_name(group))
    else:
        text += SERIAL_DRIVER
    cfg = work / "bench.toml"
    cfg.write_text(f'include = ["{ROOT / "configs" / "stimulation-default.toml"}"]\n' + text)
    return cfg


def _start_baseline(ctx, transport: str, rate_hz: float, duration_s: float, feedback: str, group: str,
                    port_file: Path, results, stop):
    """The :func:`~hil.bench.peers.baseline_responder` process in place of the service (it ends when ``stop``, an
    event, is set)."""
    if transport == "can":
        args = dict(interface="udp_multicast", channel=group, dbc_path=str(DBC),
                    muscle_names=list(load_model().muscle_names), feedback=tuple(feedback_set(feedback, rate_hz)))
    else:
        args = dict(port="pty", sensor_port="pty", channel_map=list(range(8)), client_timeout_s=2.5)
    proc = ctx.Process(target=baseline_responder, name="hil-bench-baseline",
                       args=(transport, args, rate_hz, duration_s + END_MARGIN_S, str(port_file), results, stop))
    proc.start()
    return proc


def _end_measured_side(service_run, stop) -> None:
    """Once the peer has reported, the measured side has nothing left to answer: a stop request ends the service
    after its current tick (as ``hil run`` on SIGINT), ``stop`` the baseline responder at its next deadline."""
    if service_run is not None:
        service_run.status.stop_request = 1.0
    stop.set()


def _as_dict(result) -> dict:
    """A service run's RunResult or the baseline responder's dict, as a dict."""
    return result.to_dict() if isinstance(result, RunResult) else result


def _ports_or_error(rt_proc, results, port_file: Path) -> dict:
    """The ports the measured side announced, or ``{"error": ...}`` once it died or kept silent too long."""
    t_wait = time.monotonic() + 180
    while not port_file.exists():
        if not rt_proc.is_alive() or time.monotonic() > t_wait:
            if rt_proc.is_alive():
                return {"error": "the service did not announce its ports"}
            try:
                return {"error": _as_dict(results.get(timeout=5)).get("error", "no ports")}
            except queue.Empty:
                return {"error": f"{rt_proc.name} exited (code {rt_proc.exitcode}) without a result"}
        time.sleep(0.05)
    return json.loads(port_file.read_text())


def _peer_process(ctx, transport: str, group: str, ports: dict, duration_s: float, feedback: str, rate_hz: float,
                  peer_out):
    p = next(iter(ports.values()))
    if transport == "can":
        return ctx.Process(target=can_peer, args=(group, str(DBC), duration_s, peer_out,
                                                  tuple(feedback_set(feedback, rate_hz))), name="bench-peer")
    if transport == "lsl":
        return ctx.Process(target=lsl_peer, args=(lsl_peer_name(group), rate_hz, duration_s, peer_out),
                           name="bench-peer")
    if transport in P24_TRANSPORTS:
        return ctx.Process(target=p24_peer, args=(transport[4:], p["stimulator"], p["sensors"], rate_hz, duration_s,
                                                  peer_out), name="bench-peer")
    return ctx.Process(target=serial_peer, args=(p["stimulator"], p["sensors"], duration_s, peer_out),
                       name="bench-peer")


def run_link_bench(transport: str, rate_hz: float, duration_s: float, feedback: str = "auto",
                   baseline: bool = False) -> dict:
    """One measurement: service at ``rate_hz`` with the transport, the peer for ``duration_s``; with
    ``baseline`` the :func:`~hil.bench.peers.baseline_responder` instead of the service."""
    work = Path(tempfile.mkdtemp(prefix="hil-bench-link-"))
    group = host_local_group(random.randint(1, 0xFFFF))
    cfg = _write_config(work, transport, rate_hz, feedback, group)
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    service_run = None
    port_file = work / "ports.json"
    stop = ctx.Event()
    if baseline:
        rt_proc = _start_baseline(ctx, transport, rate_hz, duration_s, feedback, group, port_file, results, stop)
    else:
        service_run = ServiceRun(str(cfg), duration_s + END_MARGIN_S, None, port_file)
        service_run.start()
        rt_proc, results = service_run.proc, service_run.results
    peer_out = ctx.Queue()
    peer = None
    try:
        ports = _ports_or_error(rt_proc, results, port_file)
        if "error" in ports:
            return ports
        peer = _peer_process(ctx, transport, group, ports, duration_s, feedback, rate_hz, peer_out)
        udp_overflows = udp_receive_buffer_errors()
        peer.start()
        peer_result = peer_out.get(timeout=duration_s + 120)
        _end_measured_side(service_run, stop)
        if udp_overflows is not None:
            after = udp_receive_buffer_errors()
            udp_overflows = None if after is None else after - udp_overflows
        summary = _as_dict(results.get(timeout=duration_s + 120))
    finally:
        if peer is not None:
            peer.join(10)
        rt_proc.join(30)
        if service_run is not None:
            service_run.close()
    if not summary.get("ok"):
        return {"error": summary.get("error")}
    return _link_result(transport, rate_hz, duration_s, feedback, baseline, summary, peer_result, udp_overflows)


def _link_result(transport: str, rate_hz: float, duration_s: float, feedback: str, baseline: bool, summary: dict,
                 peer_result: dict, udp_overflows: int | None) -> dict:
    """The peer's round trips with the measured side's figures: the responder's lateness for a baseline
    run, else the loop's lateness, misses, rejects and where lost frames went."""
    lat = summary["lateness_us"]
    common = {"transport": transport, "rate_hz": rate_hz, "duration_s": duration_s,
              "feedback": feedback_set(feedback, rate_hz) if transport == "can" else
              ["fes-hil-arm, fes-hil-stim"] if transport == "lsl" else ["sensor stream (full frame)"],
              **peer_result, "goal_rtt_p99_ms": (1.0 / rate_hz + 0.5e-3) * 1e3}
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


def measure_link(transport: str, rate_hz: float, duration_s: float, feedback: str, baseline: bool) -> dict:
    """:func:`run_link_bench` with the hypervisor steal on every CPU during it (``steal_ms``)."""
    n_cpus = os.cpu_count() or 1
    before = [steal_s(c) for c in range(n_cpus)]
    run = run_link_bench(transport, rate_hz, duration_s, feedback, baseline=baseline)
    after = [steal_s(c) for c in range(n_cpus)]
    steal = [steal_delta_ms(b, a) for b, a in zip(before, after)]
    run["steal_ms"] = {f"cpu{c}": ms for c, ms in enumerate(steal) if ms is not None}
    return run


def link_bench_result(transport: str, runs: list[dict]) -> dict:
    """The benchmark's document: the runs (one per rate) and the machine they ran on."""
    n_cpus = os.cpu_count() or 1
    return {"transport": transport, "runs": runs, "cpu": cpu_model(), "loop_cpu": n_cpus - 1 if n_cpus > 1 else None,
            "workqueue_cpus": unbound_workqueue_cpus()}
