"""Offline runs: a config's tick engine and in-process controllers driven by the same
:class:`hil.tick.TickBody` as the real-time loop, back to back, as fast as the CPU allows.

The frames are bit-identical to a real-time run of the same config, except the overrun status bit,
which only a wall clock can set. External transports are refused: their commands arrive in wall-clock
time, so an offline run of them would not be a run of anything (replay a recording of such a run
instead, :mod:`hil.replay`)."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from hil.config import ServiceConfig
from hil.tick import TickBody, TickListener, driver_streams
from sim.config import ConfigError

BATCH_TICKS = 1024
"""Tick records an offline recording collects before it appends a block (its commands' block first)."""


@dataclass
class OfflineResult:
    ticks: int
    stopped_by: str        # 'duration', 'gh_unstable', 'range_of_motion'
    stop_detail: str
    wall_s: float = 0.0    # the ticks' wall-clock time (after the warm-up)
    final_elbow_deg: float = float("nan")


class OfflineRecorder:
    """Writes a run's tick records and command log to a recording in this process, in the real-time
    recorder's format and order (each block of commands before the block of ticks it belongs to), so the file
    replays and exports as any other; no tick is ever dropped, the run simply waits for the disk."""

    def __init__(self, path: str, header: dict, tick_dtype: np.dtype, driver_streams: dict | None = None) -> None:
        from drivers.contract import COMMAND_DTYPE
        from hil.recording import RecordingWriter
        self.driver_streams = {name: d for name, (d, _) in (driver_streams or {}).items()}
        self.writer = RecordingWriter(path, header, {"ticks": tick_dtype, "commands": COMMAND_DTYPE,
                                                     **{n: dt for n, (_, dt) in (driver_streams or {}).items()}})
        self.ticks = np.zeros(BATCH_TICKS, tick_dtype)
        self.pending: dict[str, list[np.ndarray]] = {"commands": [], **{n: [] for n in self.driver_streams}}
        self.n = 0

    def on_tick(self, record: np.ndarray, engine, actuation_ns: int) -> None:
        if engine.n_log:
            self.pending["commands"].append(engine.log[:engine.n_log].copy())
        for name, driver in self.driver_streams.items():
            rows = driver.take_records(name)
            if rows.shape[0]:
                self.pending[name].append(rows.copy())
        self.ticks[self.n] = record[0]
        self.n += 1
        if self.n == BATCH_TICKS:
            self.write()

    def write(self) -> None:
        for name in reversed(list(self.pending)):       # the real-time recorder's order: ticks last
            if self.pending[name]:
                self.writer.append(name, np.concatenate(self.pending[name]))
                self.pending[name] = []
        self.writer.append("ticks", self.ticks[:self.n])
        self.writer.hand_to_os()
        self.n = 0

    def close(self) -> None:
        self.write()
        self.writer.close()


def run_offline(cfg: ServiceConfig, n_ticks: int, listeners: list[TickListener] | None = None,
                record_path: str | None = None) -> OfflineResult:
    """Run ``n_ticks`` ticks of ``cfg`` without a clock; listeners get every tick record, and ``record_path``
    (a new file) the recording. Tick k starts at the virtual time k T (its ``deadline_ns`` and ``start_ns``,
    with no lateness)."""
    from hil.service import build_engine

    external = [f"driver[{i}] ({d['type']})" for i, d in enumerate(cfg.drivers) if d["type"] != "loopback"]
    if external:
        raise ConfigError(f"an offline run takes in-process (loopback) controllers only, not {', '.join(external)}",
                          file=cfg.path, key="driver")
    model, engine, drivers = build_engine(cfg)
    engine.warmup()
    body = TickBody(engine, drivers, listeners)
    recorder = None
    if record_path is not None:
        from hil.service import recording_header
        recorder = OfflineRecorder(record_path, {**recording_header(cfg, model, engine), "offline": True},
                                   body.record.dtype, driver_streams(drivers))
        body.listeners.insert(0, recorder)
    period_ns = round(cfg.loop.period_s * 1e9)
    rec, result, tick = body.record[0], None, 0
    t0 = time.perf_counter()
    try:
        for tick in range(n_ticks):
            now = tick * period_ns
            result = body.step(tick, now)
            rec["deadline_ns"], rec["start_ns"], rec["lateness_ns"] = now, now, 0
            rec["tick_ns"], rec["skipped_deadlines"] = rec["compute_ns"], 0
            body.emit()
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
                         stopped_by=result.stop_reason if stopped else "duration", stop_detail=engine.stop_detail,
                         wall_s=wall, final_elbow_deg=math.degrees(engine.elbow_flexion_rad))
