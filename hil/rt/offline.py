"""Offline runs: a config's tick engine and in-process controllers driven by the same
:class:`hil.rt.tick.TickBody` as the real-time loop, back to back, as fast as the CPU allows.

The frames are bit-identical to a real-time run of the same config, except the overrun status bit,
which only a wall clock can set. External transports are refused: their commands arrive in wall-clock
time, so an offline run of them would not be a run of anything (replay a recording of such a run
instead, :mod:`hil.recording.replay`)."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from drivers.core.contract import COMMAND_DTYPE
from hil.config import ServiceConfig
from hil.recording.hilrec import RecordingWriter
from hil.rt.tick import HeldBytes, TickBody, TickListener, driver_streams
from hil.safety.table import StopReason
from hil.service.build import build_engine, recording_header
from sim.das3.config import ConfigError

BATCH_TICKS = 1024
"""Tick records an offline recording collects before it appends a block (its commands' block first)."""


@dataclass
class OfflineResult:
    ticks: int
    stopped_by: str        # StopReason.DURATION or a safety rule's stop reason (hil.safety.table)
    stop_detail: str
    wall_s: float = 0.0    # the ticks' wall-clock time (after the warm-up)
    final_elbow_deg: float = float("nan")


class BlockRows:
    """One stream's rows of the block being collected, copied byte for byte into a buffer that doubles when
    full: a numpy copy of structured rows, or a list of copies joined at the end, costs more than the tick's
    other Python together."""

    def __init__(self, dtype: np.dtype, capacity: int = BATCH_TICKS) -> None:
        self.n, self.itemsize = 0, dtype.itemsize
        self._hold(np.zeros(capacity, dtype))

    def _hold(self, rows: np.ndarray) -> None:
        self.rows, self.capacity, self._bytes = rows, rows.shape[0], memoryview(rows.view(np.uint8))

    def add(self, source: memoryview, count: int) -> None:
        """``count`` rows from ``source``, the bytes of at least that many rows of this dtype."""
        n, size = self.n, self.itemsize
        if n + count > self.capacity:      # rare: the first blocks of a run with many commands
            grown = np.zeros(max(2 * self.capacity, n + count), self.rows.dtype)
            grown[:n] = self.rows[:n]
            self._hold(grown)
        self._bytes[n * size:(n + count) * size] = source[:count * size]
        self.n = n + count

    def add_rows(self, rows: np.ndarray, held: HeldBytes) -> None:
        """Rows of any layout numpy converts to this dtype; ``held`` keeps the bytes view of an array handed
        over again (a driver's own buffer)."""
        if rows is not held.array and (rows.dtype != self.rows.dtype or not rows.flags.c_contiguous):
            rows = np.ascontiguousarray(rows, dtype=self.rows.dtype)
        self.add(held.of(rows), rows.shape[0])

    def take(self) -> np.ndarray:
        """The rows collected (a view, valid until the next :meth:`add`); the next block starts empty."""
        rows, self.n = self.rows[:self.n], 0
        return rows


class OfflineRecorder:
    """Writes a run's tick records and command log to a recording in this process, in the real-time
    recorder's format and order (each block of commands before the block of ticks it belongs to), so the file
    replays and exports as any other; no tick is ever dropped, the run simply waits for the disk."""

    def __init__(self, path: str, header: dict, tick_dtype: np.dtype, driver_streams: dict | None = None) -> None:
        streams = driver_streams or {}
        self.writer = RecordingWriter(path, header, {"ticks": tick_dtype, "commands": COMMAND_DTYPE,
                                                     **{n: dt for n, (_, dt) in streams.items()}})
        self.ticks, self.commands = BlockRows(tick_dtype), BlockRows(COMMAND_DTYPE)
        self.blocks = {"commands": self.commands, **{n: BlockRows(dt) for n, (_, dt) in streams.items()}}
        self.driver_streams = [(name, d, self.blocks[name], HeldBytes()) for name, (d, _) in streams.items()]
        self._log, self._record = HeldBytes(), HeldBytes()

    def on_tick(self, record: np.ndarray, engine, actuation_ns: int) -> None:
        if engine.n_log:
            self.commands.add(self._log.of(engine.log), engine.n_log)
        for name, driver, block, held in self.driver_streams:
            rows = driver.take_records(name)
            if rows.shape[0]:
                block.add_rows(rows, held)
        self.ticks.add(self._record.of(record), 1)
        if self.ticks.n == BATCH_TICKS:
            self.write()

    def write(self) -> None:
        for name, block in reversed(self.blocks.items()):   # the real-time recorder's order: ticks last
            if block.n:
                self.writer.append(name, block.take())
        self.writer.append("ticks", self.ticks.take())
        self.writer.hand_to_os()

    def close(self) -> None:
        self.write()
        self.writer.close()


def run_offline(cfg: ServiceConfig, n_ticks: int, listeners: list[TickListener] | None = None,
                record_path: str | None = None) -> OfflineResult:
    """Run ``n_ticks`` ticks of ``cfg`` without a clock; listeners get every tick record, and ``record_path``
    (a new file) the recording. Tick k starts at the virtual time k T (its ``deadline_ns`` and ``start_ns``,
    with no lateness)."""
    external = [f"driver[{i}] ({d['type']})" for i, d in enumerate(cfg.drivers) if d["type"] != "loopback"]
    if external:
        raise ConfigError(f"an offline run takes in-process (loopback) controllers only, not {', '.join(external)}",
                          file=cfg.path, key="driver")
    model, engine, drivers = build_engine(cfg)
    engine.warmup()
    body = TickBody(engine, drivers, listeners)
    recorder = None
    if record_path is not None:
        recorder = OfflineRecorder(record_path, {**recording_header(cfg, model, engine), "offline": True},
                                   body.record.dtype, driver_streams(drivers))
        body.listeners.insert(0, recorder)
    period_ns = round(cfg.loop.period_s * 1e9)
    step, emit = body.step, body.emit
    result, tick = None, 0
    t0 = time.perf_counter()
    try:
        for tick in range(n_ticks):
            result = step(tick, tick * period_ns)      # timed as a tick on its deadline: the record's default
            emit()
            if result.stop:
                break
    finally:
        wall = time.perf_counter() - t0
        for d in drivers:
            d.shutdown()
        if recorder is not None:
            recorder.close()
    stopped = result is not None and result.stop
    return OfflineResult(ticks=tick + 1 if result is not None else 0,
                         stopped_by=result.stop_reason if stopped else StopReason.DURATION, stop_detail=engine.stop_detail,
                         wall_s=wall, final_elbow_deg=math.degrees(engine.elbow_flexion_rad))
