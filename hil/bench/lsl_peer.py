"""The LSL side of ``hil bench link --transport lsl``: the service's driver table and an LSL controller peer.

The peer is a controller written against LSL only (pylsl). For every ``fes-hil-arm`` sample (tick k) it
publishes one command sample at once, the bench channel's current a new value each time (20 values in
turn), and it reads ``fes-hil-stim``, which reports the stimulation each tick applied, stamped with the
tick's start. It measures:

- **command sample -> applied**: from just before the push to the start of the first tick whose
  ``fes-hil-stim`` sample shows that current (a command that arrives before tick k + 1 starts is applied
  there; ``applied_next_tick_percent`` counts those);
- **tick -> outlet sample**: from a tick's start (the arm sample's timestamp, LSL clock) to the sample's
  arrival in the peer.

Both are differences of one clock (LSL's, CLOCK_MONOTONIC on Linux) on one machine. Lost samples are
gaps in the arm samples' timestamps.
"""
from __future__ import annotations

import collections
import math
import os

import numpy as np

from drivers.ipc.link_process import link_scheduling
from drivers.lsl.driver import LOCALHOST_API_CONFIG

BENCH_CHANNEL = 3                 # biceps (index) in configs/stimulation-default.toml
N_CHANNELS = 8
CURRENTS_MA = [10.0 + k for k in range(20)]

LSL_DRIVER = """
[[driver]]
type = "lsl"
api_config = "{api_config}"
[driver.inlet]
name = "{name}"
"""


def lsl_peer_name(run_id: str) -> str:
    """The peer's stream name for one measurement (``run_id``: unique per run)."""
    return f"hil-bench-peer-{run_id}"


def _localhost_config(directory) -> str:
    """A liblsl config file in ``directory`` that keeps LSL on this machine; its path."""
    path = os.path.join(directory, "lsl_api.cfg")
    with open(path, "w") as fh:
        fh.write(LOCALHOST_API_CONFIG)
    return path


def lsl_driver_table(work, name: str) -> str:
    """The service's ``[[driver]]`` table: the peer's stream by name, LSL kept on this machine (a liblsl
    config in ``work``)."""
    return LSL_DRIVER.format(api_config=_localhost_config(work), name=name)


def _percentiles(samples_s: list[float], prefix: str) -> dict:
    s = np.array(samples_s) * 1e3
    pct = (lambda p: float(np.percentile(s, p))) if s.size else (lambda p: math.nan)
    return {f"{prefix}_p50_ms": pct(50), f"{prefix}_p99_ms": pct(99),
            f"{prefix}_max_ms": float(s.max()) if s.size else math.nan}


class AppliedTimes:
    """Pending commands (current, send time, trigger tick's start) matched with the stimulation applied."""

    def __init__(self, period_s: float) -> None:
        self.period_s = period_s
        self.pending: collections.deque = collections.deque()
        self.applied: list[float] = []
        self.next_tick = 0
        self.superseded = 0
        self.sent = 0

    def sent_now(self, current: float, t_send: float, trigger_ts: float) -> None:
        self.pending.append((current, t_send, trigger_ts))
        self.sent += 1

    def tick(self, current: float, ts: float) -> None:
        """The stimulation of the tick that started at ``ts``: it applies the newest pending command with
        that current sent before ``ts``; those before it were superseded."""
        if not any(c == current and t < ts for c, t, _ in self.pending):
            return
        while self.pending:
            c, t_send, trigger = self.pending.popleft()
            if c == current and t_send < ts:
                self.applied.append(ts - t_send)
                self.next_tick += round((ts - trigger) / self.period_s) == 1
                return
            self.superseded += 1

    def summary(self) -> dict:
        n = len(self.applied)
        return {"commands_sent": self.sent, "commands_applied": n, "commands_superseded": self.superseded,
                "unanswered": len(self.pending), **_percentiles(self.applied, "applied"),
                "applied_next_tick_percent": 100.0 * self.next_tick / n if n else math.nan}


def lsl_peer(name: str, rate_hz: float, duration_s: float, out) -> None:
    """The controller peer (a process): see the module docstring. Puts its summary dict on ``out``."""
    import tempfile
    os.environ["LSLAPICFG"] = _localhost_config(tempfile.mkdtemp(prefix="hil-bench-lsl-"))
    n = os.cpu_count() or 1
    link_scheduling(60, n - 1 if n > 1 else None)    # like the other peers: SCHED_FIFO 60, off the loop's CPU
    import pylsl
    from pylsl.util import LostError
    outlet = pylsl.StreamOutlet(pylsl.StreamInfo(name, "FESCommand", 3 * N_CHANNELS, 0, "float32", name))
    try:
        arm, stim = (_inlet(pylsl, s) for s in ("fes-hil-arm", "fes-hil-stim"))
        if arm is None or stim is None:
            out.put({"error": "the service's fes-hil-arm / fes-hil-stim streams were not found within 60 s"})
            return
        result = _closed_loop(pylsl, outlet, arm, stim, rate_hz, duration_s)
    except LostError:
        result = {"error": "the service's streams went away during the measurement"}
    out.put(result)


def _inlet(pylsl, stream: str):
    found = pylsl.resolve_byprop("name", stream, 1, 60.0)
    if not found:
        return None
    inlet = pylsl.StreamInlet(found[0], max_buflen=1, max_chunklen=1, recover=False)
    inlet.open_stream(10.0)
    return inlet


def _closed_loop(pylsl, outlet, arm, stim, rate_hz: float, duration_s: float) -> dict:
    """One command per arm sample for ``duration_s``; the two delays and the lost samples."""
    period = 1.0 / rate_hz
    applied, outlet_delays = AppliedTimes(period), []
    sample = np.zeros(3 * N_CHANNELS, np.float32)
    sample[3 * BENCH_CHANNEL + 1:3 * BENCH_CHANNEL + 3] = (200.0, 40.0)
    arm_buf = np.zeros((1024, arm.channel_count), np.float32)
    stim_buf = np.zeros((1024, 3 * N_CHANNELS), np.float32)
    last_ts, lost, k = None, 0, 0
    arm.pull_sample(timeout=60.0)                     # the run has started: what queued up before is not timed
    while arm.pull_chunk(max_samples=1024, dest_obj=arm_buf)[1] or stim.pull_chunk(max_samples=1024,
                                                                                     dest_obj=stim_buf)[1]:
        pass
    t_end = pylsl.local_clock() + duration_s
    while pylsl.local_clock() < t_end:
        _, stamps = arm.pull_chunk(timeout=0.5, max_samples=1024, dest_obj=arm_buf, min_samples=1)
        now = pylsl.local_clock()
        if stamps:
            current = CURRENTS_MA[k % len(CURRENTS_MA)]
            sample[3 * BENCH_CHANNEL] = current
            t_send = pylsl.local_clock()
            outlet.push_sample(sample)
            applied.sent_now(current, t_send, stamps[-1])
            k += 1
            outlet_delays += [now - ts for ts in stamps]
            gaps = np.diff(np.concatenate(([last_ts], stamps)) if last_ts is not None else stamps)
            lost += int(np.sum(np.round(gaps / period) - 1))
            last_ts = stamps[-1]
        _, stim_ts = stim.pull_chunk(max_samples=1024, dest_obj=stim_buf)
        for i, ts in enumerate(stim_ts):
            applied.tick(float(stim_buf[i, 3 * BENCH_CHANNEL]), ts)
    return {**applied.summary(), **_percentiles(outlet_delays, "outlet"), "arm_samples": len(outlet_delays),
            "lost_frames": lost}
