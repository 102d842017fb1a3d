"""The fixed-period real-time loop: when each tick runs (:class:`hil.rt.tick.TickBody` is what a tick does).

This loop is the only thread of its process that runs Python while the run lasts (README "Process
architecture"): metrics exposition and recording to disk happen in helper processes fed through shared
memory (:mod:`hil.telemetry.metrics`, :mod:`hil.recording.hilrec`), transports that block on I/O run in link processes
(:mod:`drivers.ipc.link`), and in-process (loopback) controllers run synchronously inside the tick. So the
tick never waits on I/O, on a lock held by an I/O thread, or on metric rendering.

Timing: absolute deadlines d_k = t0 + k T (CLOCK_MONOTONIC) that never drift; the loop sleeps until
``spin_us`` before the deadline and spins the rest (platform facts: sleep alone gives ms outliers).
An overrun (a tick starting after the next deadline) is counted and the missed deadlines are skipped:
no catch-up burst, and the simulated time stays locked to the tick count (t = (k + 1) T for tick k),
which is what makes a run reproducible offline.

Real-time setup where permitted: SCHED_FIFO at a configured priority, CPU affinity, mlockall, and
the cyclic GC frozen and disabled for the run; each refusal is a warning and a metric, never an error.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from hil.rt.tick import TickBody, tick_dtype
from hil.safety.table import StopReason
from hil.service.run_result import percentiles_us
from sim.config_schema import Key, Section, from_ms

NS = 1_000_000_000


LOOP_SCHEMA = Section("loop", "The fixed-period real-time loop.", (
    Key("period_ms", "number", 4.0, "tick period T", lo=1.0, hi=10.0, field="period_s", to_si=from_ms),
    Key("substeps", "integer", 1, "plant steps per tick (period / substeps <= 6 ms)", lo=1, hi=20),
    Key("spin_us", "number", 200.0, "the loop sleeps until this long before a deadline and spins the rest",
        lo=0.0, hi=5000.0),
    Key("sched_fifo", "boolean", True, "ask for SCHED_FIFO (a refusal is a warning)"),
    Key("priority", "integer", 80, "SCHED_FIFO priority", lo=1, hi=99),
    Key("cpu", "integer", None, "pin the loop to this CPU (none: leave the affinity alone)", lo=0, hi=1023),
    Key("mlock", "boolean", True, "lock the process's memory (mlockall; a refusal is a warning)"),
))


@dataclass(frozen=True)
class LoopConfig:
    period_s: float = LOOP_SCHEMA.default("period_s")
    substeps: int = LOOP_SCHEMA.default("substeps")
    spin_us: float = LOOP_SCHEMA.default("spin_us")
    sched_fifo: bool = LOOP_SCHEMA.default("sched_fifo")
    priority: int = LOOP_SCHEMA.default("priority")
    cpu: int | None = LOOP_SCHEMA.default("cpu")
    mlock: bool = LOOP_SCHEMA.default("mlock")
    switch_interval_s: float = 2e-4    # sys.setswitchinterval during the run (not a config key)


@dataclass
class RealtimeStatus:
    sched_fifo: bool = False
    affinity: bool = False
    mlock: bool = False
    warnings: list[str] = field(default_factory=list)

    @property
    def privileged(self) -> bool:
        return self.sched_fifo and self.mlock


def setup_realtime(config: LoopConfig) -> RealtimeStatus:
    """Ask for SCHED_FIFO, CPU affinity and mlockall; report what was refused (never raises)."""
    status = RealtimeStatus()
    if config.sched_fifo:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(config.priority))
            status.sched_fifo = True
        except (OSError, AttributeError) as exc:
            status.warnings.append(f"SCHED_FIFO priority {config.priority} refused ({exc}); running "
                                   "with normal scheduling, deadlines may be missed")
    if config.cpu is not None:
        try:
            os.sched_setaffinity(0, {config.cpu})
            status.affinity = True
        except (OSError, AttributeError) as exc:
            status.warnings.append(f"CPU affinity {{{config.cpu}}} refused ({exc})")
    if config.mlock:
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
            MCL_CURRENT, MCL_FUTURE = 1, 2
            if libc.mlockall(MCL_CURRENT | MCL_FUTURE) != 0:
                err = ctypes.get_errno()
                raise OSError(err, os.strerror(err))
            status.mlock = True
        except OSError as exc:
            status.warnings.append(f"mlockall refused ({exc}); page faults may delay ticks")
    return status


def restore_scheduling() -> None:
    """Back to SCHED_OTHER (after a run, before slow post-processing)."""
    try:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    except (OSError, AttributeError):
        pass


def wait_until(deadline_ns: int, spin_ns: int) -> int:
    """Sleep until ``spin_ns`` before the deadline, then spin; returns the time reached (ns)."""
    clock = time.monotonic_ns
    now = clock()
    remaining = deadline_ns - now - spin_ns
    if remaining > 0:
        time.sleep(remaining / NS)
    now = clock()
    while now < deadline_ns:
        now = clock()
    return now


TIMING_COLUMNS = ("lateness", "fetch", "compute", "publish", "listeners")
"""Per-tick timing the loop keeps in memory for the run's summary: start minus deadline, then the tick's
phases (drivers' fetch, the engine's step, drivers' publish, the listeners: recording rings and metrics)."""


def tick_timing_us(timing_s: np.ndarray | None) -> dict:
    """The run result's timing fields from the loop's per-tick log: ``lateness_us`` and ``compute_us``
    (p50, p99, p99.9, max) and ``tick_phases_us`` (the median of each phase)."""
    if timing_s is None or not timing_s.size:
        return {"lateness_us": {}, "compute_us": {}, "tick_phases_us": {}}
    return {"lateness_us": percentiles_us(timing_s[:, 0]), "compute_us": percentiles_us(timing_s[:, 2]),
            "tick_phases_us": {name: float(np.median(timing_s[:, i]) * 1e6)
                               for i, name in enumerate(TIMING_COLUMNS) if name != "lateness"}}


@dataclass
class RunSummary:
    ticks: int = 0
    deadline_misses: int = 0
    skipped_deadlines: int = 0
    max_lateness_s: float = 0.0
    commands_unrecorded: int = 0   # command-log entries that reached neither the log nor the recording ring
    stall_s: float = 0.0           # the tick that outlasted the stall timeout took this long (0: none did)
    stopped_by: str = ""       # a hil.safety.table.StopReason, or an extension rule's stop reason
    realtime: RealtimeStatus | None = None
    timing_s: np.ndarray | None = None   # (ticks, len(TIMING_COLUMNS)), s


def deadlines_missed(end_ns: int, next_deadline_ns: int, period_ns: int) -> int:
    """Deadlines already past when a tick ends at ``end_ns`` (0 if it ended before the next one). The loop
    skips them: no catch-up burst, and the tick count, hence the simulated time, stays unaffected."""
    if end_ns <= next_deadline_ns:
        return 0
    return (end_ns - next_deadline_ns) // period_ns + 1


class RealtimeLoop:
    """Runs a :class:`TickBody` against wall-clock deadlines. ``clock`` (ns) and ``wait(deadline_ns,
    spin_ns) -> start_ns`` are injectable, so a test can drive the deadline rules with a fake clock."""

    def __init__(self, body: TickBody, config: LoopConfig, clock=time.monotonic_ns, wait=wait_until,
                 metrics=None, stall_timeout_s: float | None = None, ticks_cell: np.ndarray | None = None) -> None:
        """``stall_timeout_s``: a tick that takes longer ends the run (``tick_stall``) when it returns at all;
        the supervisor's :class:`hil.service.supervisor.StallWatch` handles the ticks that never return.
        ``ticks_cell``: a one-element float array (in the supervisor's status block) given the number of ticks
        run after every tick, so that a stall is known to the tick."""
        self.body = body
        self.ticks_cell = np.zeros(1) if ticks_cell is None else ticks_cell
        self.stall_ns = NS * 3600 * 24 * 365 if stall_timeout_s is None else int(stall_timeout_s * NS)
        self.engine = body.engine
        self.config = config
        self.clock, self.wait = clock, wait
        self.metrics = metrics        # hil.telemetry.metrics.LoopMetrics (also one of the body's listeners) or None
        self._stop = False
        self._stop_reason = ""

    @property
    def record(self) -> np.ndarray:
        return self.body.record

    def request_stop(self, reason: str = StopReason.SIGNAL) -> None:
        """Ask the loop to end after the current tick (signal handlers and health checks call this);
        the first reason given is the run's ``stopped_by``."""
        if not self._stop:
            self._stop_reason = reason
        self._stop = True

    def run(self, n_ticks: int | None, progress=None, keep_lateness: bool = True, on_start=None) -> RunSummary:
        """Run ``n_ticks`` ticks (None: until :meth:`request_stop`). ``progress(tick)`` is called at
        most every 100 ms from the loop, between ticks. ``on_start()`` is called once the loop is set up
        (scheduling, memory lock, a collected and frozen heap, the kernels touched), right before the wait for
        the first tick: setting up takes as long as the process's memory and heap are large, which no tick
        watchdog may count as a tick."""
        summary = RunSummary()
        summary.realtime = setup_realtime(self.config)
        if self.metrics is not None:
            self.metrics.privileged.set(1.0 if summary.realtime.privileged else 0.0)
            self.metrics.running.set(1.0)
        timing_log = np.zeros((n_ticks if (n_ticks and keep_lateness) else 0, len(TIMING_COLUMNS)))
        old_switch = sys.getswitchinterval()
        sys.setswitchinterval(self.config.switch_interval_s)
        gc.collect()
        gc.freeze()
        gc.disable()
        self.engine.warmup()        # touch every kernel and the plant's data right before the first tick
        try:
            if on_start is not None:
                on_start()
            self._ticks(n_ticks, summary, timing_log, progress)
        finally:
            if self.metrics is not None:
                self.metrics.sync(self.engine, self.clock())
                self.metrics.running.set(0.0)
            gc.enable()
            gc.unfreeze()
            sys.setswitchinterval(old_switch)
            restore_scheduling()
        if not summary.stopped_by:
            summary.stopped_by = self._stop_reason if self._stop else StopReason.DURATION
        summary.timing_s = timing_log[:summary.ticks] if timing_log.shape[0] else None
        return summary

    def _ticks(self, n_ticks, summary: RunSummary, timing_log: np.ndarray, progress) -> None:
        """The timed loop: absolute deadlines t0 + slot T, late ones skipped (:func:`deadlines_missed`)."""
        period_ns = int(round(self.config.period_s * NS))
        spin_ns = int(self.config.spin_us * 1000)
        body, clock = self.body, self.clock
        t0 = clock() + 2 * period_ns
        slot = tick = 0               # wall-clock deadline index, tick index
        overrun = False
        next_progress = 0
        while not self._stop and (n_ticks is None or tick < n_ticks):
            deadline = t0 + slot * period_ns
            start = self.wait(deadline, spin_ns)
            result = body.step(tick, start, overrun)
            end = clock()
            if end - start > self.stall_ns:
                self.request_stop(StopReason.TICK_STALL)
                summary.stall_s = (end - start) / NS
            slot += 1
            missed = deadlines_missed(end, t0 + slot * period_ns, period_ns)
            slot += missed
            overrun = missed > 0
            summary.deadline_misses += overrun
            summary.skipped_deadlines += missed
            body.set_timing(deadline, start, end - start, missed)
            summary.commands_unrecorded += body.emit()
            if timing_log.shape[0] > tick:
                row = timing_log[tick]
                row[0] = (start - deadline) / NS
                row[1] = body.fetch_ns / NS
                row[2] = body.compute_ns / NS
                row[3] = body.publish_ns / NS
                row[4] = (clock() - end) / NS
            summary.max_lateness_s = max(summary.max_lateness_s, (start - deadline) / NS)
            tick += 1
            summary.ticks = tick
            self.ticks_cell[0] = tick
            if result.stop:
                summary.stopped_by = result.stop_reason
                break
            if progress is not None and end >= next_progress:
                progress(tick)
                next_progress = clock() + NS // 10


__all__ = ["TIMING_COLUMNS", "LoopConfig", "RealtimeLoop", "RealtimeStatus", "RunSummary", "deadlines_missed", "setup_realtime",
           "tick_dtype", "wait_until"]
