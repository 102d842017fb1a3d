"""The fixed-period real-time loop (the driver; :class:`hil.engine.TickEngine` is the stepper).

Process/thread architecture (see README "Real-time architecture"): this loop is the only thread of
its process that runs Python while the run lasts. Metrics exposition and recording to disk happen in two
helper processes fed through shared memory (:mod:`hil.metrics`, :mod:`hil.recording`); in-process
(loopback) controllers run synchronously inside the tick; transports that need blocking I/O do it in
their own processes (later issue). So the tick never waits on I/O, on a lock held by an I/O thread, or
on metric rendering.

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

from drivers.base import COMMAND_DTYPE, Driver
from hil.engine import TickEngine

NS = 1_000_000_000


@dataclass(frozen=True)
class LoopConfig:
    period_s: float = 0.004
    substeps: int = 1
    spin_us: float = 200.0
    sched_fifo: bool = True
    priority: int = 80
    cpu: int | None = None         # pin the loop to this CPU (None: leave affinity alone)
    mlock: bool = True
    switch_interval_s: float = 2e-4


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


def tick_dtype(n_channels: int, n_muscles: int, frame: np.dtype) -> np.dtype:
    """The per-tick record of a run (recorded every tick)."""
    return np.dtype([
        ("tick", "<i8"),
        ("deadline_ns", "<i8"),     # CLOCK_MONOTONIC
        ("start_ns", "<i8"),
        ("lateness_ns", "<i8"),     # start - deadline
        ("compute_ns", "<i8"),      # engine step (safety, stimulation, plant sub-steps, sensors)
        ("tick_ns", "<i8"),         # whole tick body
        ("skipped_deadlines", "<i8"),
        ("commands_unrecorded", "<i8"),   # this tick's command-log entries missing from the commands stream
        ("applied", "<f8", (max(n_channels, 1), 4)),  # pw us, amp mA, freq Hz, mode, after safety
        ("u", "<f8", (n_muscles,)),  # applied excitations
        ("frame", frame),
    ])


class Sinks:
    """Optional outputs of the loop (recording rings and metrics); any may be None."""

    def __init__(self, tick_ring=None, command_ring=None, metrics=None) -> None:
        self.tick_ring = tick_ring
        self.command_ring = command_ring
        self.metrics = metrics


@dataclass
class RunSummary:
    ticks: int = 0
    deadline_misses: int = 0
    skipped_deadlines: int = 0
    max_lateness_s: float = 0.0
    commands_unrecorded: int = 0   # command-log entries that reached neither the log nor the recording ring
    stopped_by: str = ""       # 'duration', 'signal', 'gh_unstable', 'range_of_motion', 'recording_failed',
    #                            'parent_died''
    realtime: RealtimeStatus | None = None
    lateness_s: np.ndarray | None = None


class RealtimeLoop:
    """Runs a :class:`TickEngine` against wall-clock deadlines with a set of drivers."""

    def __init__(self, engine: TickEngine, drivers: list[Driver], config: LoopConfig,
                 sinks: Sinks | None = None) -> None:
        self.engine = engine
        self.drivers = drivers
        self.config = config
        self.sinks = sinks or Sinks()
        n_ch = engine.n_channels
        self.record = np.zeros(1, tick_dtype(n_ch, engine.plant.model.n_muscles, engine.sensor.dtype))
        self._stop = False
        self._stop_reason = ""

    def request_stop(self, reason: str = "signal") -> None:
        """Ask the loop to end after the current tick (signal handlers and health checks call this);
        the first reason given is the run's ``stopped_by``."""
        if not self._stop:
            self._stop_reason = reason
        self._stop = True

    def run(self, n_ticks: int | None, progress=None, keep_lateness: bool = True) -> RunSummary:
        """Run ``n_ticks`` ticks (None: until :meth:`request_stop`). ``progress(tick)`` is called at
        most every 100 ms from the loop, between ticks."""
        cfg = self.config
        period_ns = int(round(cfg.period_s * NS))
        spin_ns = int(cfg.spin_us * 1000)
        summary = RunSummary()
        summary.realtime = setup_realtime(cfg)
        metrics = self.sinks.metrics
        if metrics is not None:
            metrics.privileged.set(1.0 if summary.realtime.privileged else 0.0)
            metrics.running.set(1.0)
        lateness_log = np.zeros(n_ticks if (n_ticks and keep_lateness) else 0)
        engine, drivers, rec = self.engine, self.drivers, self.record[0]
        old_switch = sys.getswitchinterval()
        sys.setswitchinterval(cfg.switch_interval_s)
        gc.collect()
        gc.freeze()
        gc.disable()
        engine.warmup()             # touch every kernel and the plant's data right before the first tick
        clock = time.monotonic_ns
        t0 = clock() + 2 * period_ns
        slot = 0               # wall-clock deadline index
        tick = 0
        overrun = False
        next_progress = 0
        try:
            while not self._stop and (n_ticks is None or tick < n_ticks):
                deadline = t0 + slot * period_ns
                start = wait_until(deadline, spin_ns)
                lateness = start - deadline
                engine.begin(tick, overrun)
                for d in drivers:
                    d.fetch(tick, start, engine)
                t_compute = clock()
                result = engine.step()
                t_done = clock()
                for d in drivers:
                    d.publish(result.frame)
                # record
                rec["tick"] = tick
                rec["deadline_ns"] = deadline
                rec["start_ns"] = start
                rec["lateness_ns"] = lateness
                rec["compute_ns"] = t_done - t_compute
                rec["applied"][: engine.n_channels] = engine.applied
                rec["u"] = engine.u
                rec["frame"] = result.frame[0]
                end = clock()
                rec["tick_ns"] = end - start
                # the next deadline: skip the ones already missed (no catch-up burst)
                slot += 1
                missed = (end - (t0 + slot * period_ns)) // period_ns + 1 if end > t0 + slot * period_ns else 0
                overrun = missed > 0
                if overrun:
                    summary.deadline_misses += 1
                    summary.skipped_deadlines += missed
                    slot += missed
                rec["skipped_deadlines"] = missed
                # commands before their tick record: the recorder relies on this order (hil.recording)
                unrecorded = engine.unlogged_tick
                if self.sinks.command_ring is not None and engine.n_log:
                    unrecorded += engine.n_log - self.sinks.command_ring.push_many(engine.log, engine.n_log)
                rec["commands_unrecorded"] = unrecorded
                if self.sinks.tick_ring is not None:
                    self.sinks.tick_ring.push(self.record)
                summary.commands_unrecorded += unrecorded
                if metrics is not None:
                    oldest = int(engine.log["receive_ns"][: engine.n_log].min()) if engine.n_log else None
                    metrics.on_tick(engine, start, lateness / NS, (t_done - t_compute) / NS, overrun,
                                    oldest, t_compute, unrecorded)
                if lateness_log.shape[0] > tick:
                    lateness_log[tick] = lateness / NS
                summary.max_lateness_s = max(summary.max_lateness_s, lateness / NS)
                tick += 1
                if result.stop:
                    summary.stopped_by = result.stop_reason
                    break
                if progress is not None and end >= next_progress:
                    progress(tick)
                    next_progress = clock() + NS // 10
        finally:
            if metrics is not None:
                metrics.sync(engine, clock())
                metrics.running.set(0.0)
            gc.enable()
            gc.unfreeze()
            sys.setswitchinterval(old_switch)
            restore_scheduling()
        summary.ticks = tick
        if not summary.stopped_by:
            summary.stopped_by = self._stop_reason if self._stop else "duration"
        summary.lateness_s = lateness_log[:tick] if lateness_log.shape[0] else None
        return summary


__all__ = ["COMMAND_DTYPE", "LoopConfig", "RealtimeLoop", "RealtimeStatus", "RunSummary", "Sinks",
           "setup_realtime", "tick_dtype", "wait_until"]
