"""Offline runs: a config's tick engine and in-process controllers driven by the same
:class:`hil.tick.TickBody` as the real-time loop, back to back, as fast as the CPU allows.

The frames are bit-identical to a real-time run of the same config, except the overrun status bit,
which only a wall clock can set. External transports are refused: their commands arrive in wall-clock
time, so an offline run of them would not be a run of anything (replay a recording of such a run
instead, :mod:`hil.replay`)."""
from __future__ import annotations

from dataclasses import dataclass

from hil.config import ServiceConfig
from hil.tick import TickBody, TickListener
from sim.config import ConfigError


@dataclass
class OfflineResult:
    ticks: int
    stopped_by: str        # 'duration', 'gh_unstable', 'range_of_motion'
    stop_detail: str


def run_offline(cfg: ServiceConfig, n_ticks: int, listeners: list[TickListener] | None = None) -> OfflineResult:
    """Run ``n_ticks`` ticks of ``cfg`` without a clock; listeners get every tick record. Tick k starts at
    the virtual time k T (its ``deadline_ns`` and ``start_ns``, with no lateness)."""
    from hil.service import build_engine

    external = [f"driver[{i}] ({d['type']})" for i, d in enumerate(cfg.drivers) if d["type"] != "loopback"]
    if external:
        raise ConfigError(f"an offline run takes in-process (loopback) controllers only, not {', '.join(external)}",
                          file=cfg.path, key="driver")
    _, engine, drivers = build_engine(cfg)
    engine.warmup()
    body = TickBody(engine, drivers, listeners)
    period_ns = round(cfg.loop.period_s * 1e9)
    rec, result, tick = body.record[0], None, 0
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
        for d in drivers:
            d.shutdown()
    stopped = result is not None and result.stop
    return OfflineResult(ticks=tick + 1 if result is not None else 0,
                         stopped_by=result.stop_reason if stopped else "duration", stop_detail=engine.stop_detail)
