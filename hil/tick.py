"""One tick, the same wherever it runs: the real-time loop (:mod:`hil.loop`), offline runs
(:func:`run_offline`), replay (:mod:`hil.replay`) and the tests.

A tick: every driver hands the commands that arrived to the tick engine (``fetch``), the engine steps
(safety, stimulation, plant sub-steps, sensor frame), the frame goes back to every driver
(``publish``), and the tick record goes to the listeners (recording rings, metrics, a replay's
comparison, drivers that listen to it). Who calls :meth:`TickBody.step` decides when (wall-clock
deadlines, or as fast as the CPU allows) and fills the record's timing fields; nothing in the body reads
a clock except to time the engine step, so the frames depend only on the tick index, the commands and
the plant state.
"""
from __future__ import annotations

import time
from typing import Protocol, runtime_checkable

import numpy as np

from drivers.base import Driver
from hil.engine import TickEngine, TickResult


def tick_dtype(n_channels: int, n_muscles: int, frame: np.dtype, fatigue: bool = False) -> np.dtype:
    """The per-tick record of a run (recorded every tick; the recording's ``ticks`` stream); runs with a
    fatigue model add each channel's fitness (:mod:`hil.fatigue`) before the frame."""
    fitness = [("fitness", "<f8", (max(n_channels, 1),))] if fatigue else []
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
        *fitness,
        ("frame", frame),
    ])


@runtime_checkable
class TickListener(Protocol):
    """Gets every finished tick record (a 1-element array, valid until the next tick) and the engine. A
    driver that is one (e.g. :class:`drivers.lsl.LslDriver`: the applied stimulation and the tick's start)
    gets the records of the ticks it took part in."""

    def on_tick(self, record: np.ndarray, engine: TickEngine, actuation_ns: int) -> None: ...


def driver_streams(drivers: list[Driver]) -> dict[str, tuple[Driver, np.dtype]]:
    """The recording streams the run's drivers add (``drivers.base`` rule 7): name -> (driver, dtype)."""
    streams: dict[str, tuple[Driver, np.dtype]] = {}
    for d in drivers:
        for name, dtype in d.record_streams().items():
            if name in ("ticks", "commands") or name in streams:
                raise ValueError(f"driver[{d.index}] ({d.name}): recording stream name {name!r} is taken")
            streams[name] = (d, np.dtype(dtype))
    return streams


class RecordingListener:
    """Pushes a tick's commands and the rows of the drivers' streams, then its record, into the recorder's
    rings (the recorder relies on this order, :mod:`hil.recording`); counts the command-log entries that did
    not fit in the record. ``extra``: (ring, driver, stream name) of each driver stream."""

    def __init__(self, tick_ring, command_ring, extra: list | None = None) -> None:
        self.tick_ring, self.command_ring = tick_ring, command_ring
        self.extra = list(extra or [])

    def on_tick(self, record: np.ndarray, engine: TickEngine, actuation_ns: int) -> None:
        if engine.n_log:
            record[0]["commands_unrecorded"] += engine.n_log - self.command_ring.push_many(engine.log, engine.n_log)
        for ring, driver, name in self.extra:
            rows = driver.take_records(name)
            if rows.shape[0]:
                ring.push_many(rows, rows.shape[0])
        self.tick_ring.push(record)


class TickBody:
    """fetch -> engine step -> publish -> record, for one engine and its drivers."""

    def __init__(self, engine: TickEngine, drivers: list[Driver], listeners: list[TickListener] | None = None,
                 clock=time.monotonic_ns) -> None:
        self.engine, self.drivers = engine, drivers
        self.listeners = list(listeners or []) + [d for d in drivers if isinstance(d, TickListener)]
        self.clock = clock
        self.record = np.zeros(1, tick_dtype(engine.n_channels, engine.plant.model.n_muscles, engine.sensor.dtype,
                                             engine.has_fatigue))
        self._fitness = self.record["fitness"][0, : engine.n_channels] if engine.has_fatigue else None
        self.actuation_ns = 0
        self.fetch_ns = self.publish_ns = 0     # the last tick's fetch and publish phases (not recorded)

    def step(self, tick: int, now_ns: int, overrun: bool = False) -> TickResult:
        """Run tick ``tick`` (commands received at ``now_ns``); the record's timing fields other than
        ``compute_ns`` are the caller's to fill before :meth:`emit`."""
        engine, rec, clock = self.engine, self.record[0], self.clock
        t_fetch = clock()
        engine.begin(tick, overrun)
        for d in self.drivers:
            d.fetch(tick, now_ns, engine)
        t_compute = clock()
        result = engine.step()
        t_done = clock()
        for d in self.drivers:
            d.publish(result.frame)
        self.fetch_ns, self.publish_ns = t_compute - t_fetch, clock() - t_done
        rec["tick"] = tick
        rec["compute_ns"] = t_done - t_compute
        rec["applied"][: engine.n_channels] = engine.applied
        if self._fitness is not None:
            self._fitness[:] = engine.fitness
        rec["u"] = engine.u
        rec["frame"] = result.frame[0]
        rec["commands_unrecorded"] = engine.unlogged_tick
        self.actuation_ns = t_compute
        return result

    def emit(self) -> int:
        """Hand the finished record to the listeners; returns its ``commands_unrecorded``."""
        for listener in self.listeners:
            listener.on_tick(self.record, self.engine, self.actuation_ns)
        return int(self.record[0]["commands_unrecorded"])
