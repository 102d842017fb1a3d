"""One tick, the same wherever it runs: the real-time loop (:mod:`hil.rt.loop`), offline runs
(:func:`run_offline`), replay (:mod:`hil.recording.replay`) and the tests.

A tick: every driver hands the commands that arrived to the tick engine (``fetch``), the engine steps
(safety, stimulation, plant sub-steps, sensor frame), the frame goes back to every driver
(``publish``), and the tick record goes to the listeners (recording rings, metrics, a replay's
comparison, drivers that listen to it). Who calls :meth:`TickBody.step` decides when (wall-clock
deadlines, or as fast as the CPU allows) and fills the record's timing fields; nothing in the body reads
a clock except to time the engine step, so the frames depend only on the tick index, the commands and
the plant state.

The record is the engine's (:attr:`hil.rt.engine.TickEngine.record`: the compiled tick writes the applied
stimulation, excitations, fitness and frame into it); the body fills the rest through Python views of its
fields (:class:`RecordViews`), since a numpy field store boxes a scalar or builds a view each time.
"""
from __future__ import annotations

import struct
import time
from typing import Protocol, runtime_checkable

import numpy as np

from drivers.core.interface import Driver
from hil.rt.engine import TickEngine, TickResult
from hil.rt.engine import tick_dtype as tick_dtype  # the record's layout, where the engine allocates it


@runtime_checkable
class TickListener(Protocol):
    """Gets every finished tick record (a 1-element array, valid until the next tick) and the engine. A
    driver that is one (e.g. :class:`drivers.lsl.driver.LslDriver`: the applied stimulation and the tick's start)
    gets the records of the ticks it took part in."""

    def on_tick(self, record: np.ndarray, engine: TickEngine, actuation_ns: int) -> None: ...


HEAD_FIELDS = ("tick", "deadline_ns", "start_ns", "lateness_ns", "compute_ns", "tick_ns", "skipped_deadlines",
               "commands_unrecorded")
"""The record's leading int64 fields, in order (:func:`tick_dtype`)."""
TICK, DEADLINE, START, LATENESS, COMPUTE, TICK_NS, SKIPPED, UNRECORDED = range(len(HEAD_FIELDS))
HEAD = struct.Struct(f"<{len(HEAD_FIELDS)}q")
"""The leading fields packed at once (one call instead of a view's item store per field)."""


def field_bytes(record: np.ndarray, name: str, nbytes: int | None = None) -> memoryview:
    """The bytes of field ``name`` of a 1-element record array (the first ``nbytes`` of them), writable."""
    dtype, offset = record.dtype.fields[name][:2]
    return memoryview(record.view(np.uint8))[offset:offset + (dtype.itemsize if nbytes is None else nbytes)]


def array_bytes(array: np.ndarray) -> memoryview:
    """The bytes of a C-contiguous array (raises for any other: a copy would not see later writes)."""
    if not array.flags.c_contiguous:
        raise ValueError("bytes views are of C-contiguous arrays only")
    return memoryview(array.reshape(-1).view(np.uint8))


class HeldBytes:
    """The bytes of the array last given to :meth:`of`, viewed again only when another array comes (a tick
    hands over the same arrays, tick after tick)."""

    def __init__(self) -> None:
        self.array, self.bytes = None, None

    def of(self, array: np.ndarray) -> memoryview:
        if array is not self.array:
            self.array, self.bytes = array, array_bytes(array)
        return self.bytes


class RecordViews:
    """Writable views of a tick record: its leading int64 fields as one Python int64 view (``head``, indexed
    by TICK ... UNRECORDED) and as bytes (``head_bytes``, for :data:`HEAD`), and its frame's bytes (for a frame
    sent from elsewhere: a delayed sensor's)."""

    def __init__(self, record: np.ndarray) -> None:
        names, fields = record.dtype.names, record.dtype.fields
        if names[:len(HEAD_FIELDS)] != HEAD_FIELDS or any(
                fields[n][0] != np.dtype(np.int64) or fields[n][1] != 8 * i for i, n in enumerate(HEAD_FIELDS)):
            raise ValueError("the tick record does not start with the int64 fields of HEAD_FIELDS")
        self.head_bytes = field_bytes(record, "tick", HEAD.size)
        self.head = self.head_bytes.cast("q")
        self.frame, self.frame_dtype, self._sent = field_bytes(record, "frame"), record.dtype["frame"], HeldBytes()

    def copy_frame(self, frame: np.ndarray) -> None:
        """A frame sent this tick (1 element) into the record. The record's frame is the one the sensor
        measures into: it has kept the measured frame in its history, and the next tick measures afresh."""
        if frame is not self._sent.array and frame.dtype != self.frame_dtype:
            raise ValueError(f"frame dtype {frame.dtype} is not the record's {self.frame_dtype}")
        self.frame[:] = self._sent.of(frame)


def driver_streams(drivers: list[Driver]) -> dict[str, tuple[Driver, np.dtype]]:
    """The recording streams the run's drivers add (``drivers.core.interface`` rule 7): name -> (driver, dtype)."""
    streams: dict[str, tuple[Driver, np.dtype]] = {}
    for d in drivers:
        for name, dtype in d.record_streams().items():
            if name in ("ticks", "commands") or name in streams:
                raise ValueError(f"driver[{d.index}] ({d.name}): recording stream name {name!r} is taken")
            streams[name] = (d, np.dtype(dtype))
    return streams


class RecordingListener:
    """Pushes a tick's commands and the rows of the drivers' streams, then its record, into the recorder's
    rings (the recorder relies on this order, :mod:`hil.recording.hilrec`); counts the command-log entries that did
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
        self.record = engine.record
        self.views = RecordViews(self.record)
        self._measured = engine.sensor.true_frame     # the record's own frame field
        self.actuation_ns = 0
        self.fetch_ns = self.compute_ns = self.publish_ns = 0     # the last tick's phases (compute_ns recorded)

    def step(self, tick: int, now_ns: int, overrun: bool = False) -> TickResult:
        """Run tick ``tick`` (commands received at ``now_ns``). The record's timing fields are those of a tick
        that started at ``now_ns`` on its deadline and took its compute time (a run without a clock); a
        real-time caller sets the measured ones (:meth:`set_timing`) before :meth:`emit`."""
        engine, clock = self.engine, self.clock
        t_fetch = clock()
        engine.begin(tick, overrun)
        for d in self.drivers:
            d.fetch(tick, now_ns, engine)
        t_compute = clock()
        result = engine.step()
        t_done = clock()
        for d in self.drivers:
            d.publish(result.frame)
        self.fetch_ns, self.compute_ns, self.publish_ns = t_compute - t_fetch, t_done - t_compute, clock() - t_done
        self.actuation_ns = t_compute
        self._fill(tick, now_ns, engine.unlogged_tick, result.frame)
        return result

    def _fill(self, tick: int, now_ns: int, unrecorded: int, frame: np.ndarray) -> None:
        """The record's leading fields, and the frame when it was sent from elsewhere than the record (the
        engine wrote the stimulation, excitations and fitness in place)."""
        views, compute_ns = self.views, self.compute_ns
        HEAD.pack_into(views.head_bytes, 0, tick, now_ns, now_ns, 0, compute_ns, compute_ns, 0, unrecorded)
        if frame is not self._measured:
            views.copy_frame(frame)

    def set_timing(self, deadline_ns: int, start_ns: int, tick_ns: int, skipped_deadlines: int) -> None:
        """The record's timing fields of the tick just run (lateness = start - deadline)."""
        head = self.views.head
        head[DEADLINE], head[START], head[LATENESS] = deadline_ns, start_ns, start_ns - deadline_ns
        head[TICK_NS], head[SKIPPED] = tick_ns, skipped_deadlines

    def emit(self) -> int:
        """Hand the finished record to the listeners; returns its ``commands_unrecorded``."""
        for listener in self.listeners:
            listener.on_tick(self.record, self.engine, self.actuation_ns)
        return self.views.head[UNRECORDED]
