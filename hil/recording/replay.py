"""Offline replay of a recording: rebuild the run's tick engine from its recorded config (opening no
transport: a recording made on a CAN bus replays on a laptop without one), feed the recorded commands
through :class:`ReplayDriver` at the ticks they were latched, run the same :class:`hil.rt.tick.TickBody`
as the real-time loop, and compare every sensor frame bit for bit."""
from __future__ import annotations

import numpy as np

from drivers.core.contract import (
    KIND_CHANNEL,
    KIND_DRIVER_LOST,
    KIND_EXCITATION,
    KIND_HEARTBEAT,
    KIND_VOLUNTARY,
    STATUS_OVERRUN,
)
from drivers.core.interface import CommandSink, Driver
from hil.config import service_config_from_dict
from hil.recording.hilrec import RecordingError, read_run_recording
from hil.rt.tick import TickBody
from hil.service.build import build_tick_engine


class ReplayDriver(Driver):
    """Hands a recording's command log to the engine, tick by tick, as the drivers of the run did.

    Accepted commands are fed again; a channel command that was clamped is fed again when the channel
    clamps (its log entry keeps the request); rejected ones had no effect and are skipped, and so are
    the transports' reject counts. A lost driver is lost again at the same tick."""

    name = "replay"

    def __init__(self, commands: np.ndarray, clamping_channels: frozenset[int]) -> None:
        self.commands = commands[np.argsort(commands["tick"], kind="stable")]
        self.clamping = clamping_channels
        super().__init__(index=0)

    def max_log_entries(self, largest_group: int) -> int:
        ticks = self.commands["tick"]
        return int(np.bincount(ticks - ticks.min()).max()) if ticks.size else 1

    def fetch(self, tick: int, now_ns: int, sink: CommandSink) -> None:
        ticks = self.commands["tick"]
        for c in self.commands[np.searchsorted(ticks, tick, "left"):np.searchsorted(ticks, tick, "right")]:
            self._feed(c, sink)

    def _feed(self, c, sink: CommandSink) -> None:
        kind, drv, ns, idx, v = int(c["kind"]), int(c["driver"]), int(c["receive_ns"]), int(c["index"]), c["values"]
        if kind == KIND_CHANNEL and (c["status"] == 0 or idx in self.clamping):
            sink.channel(drv, ns, idx, float(v[0]), float(v[1]), float(v[2]), int(v[3]))
        elif c["status"] != 0:
            return                                   # rejected: had no effect
        elif kind == KIND_EXCITATION:
            sink.excitation(drv, ns, idx, float(v[0]))
        elif kind == KIND_VOLUNTARY:
            sink.voluntary(drv, ns, idx, float(v[0]))
        elif kind == KIND_HEARTBEAT:
            sink.heartbeat(drv, ns)
        elif kind == KIND_DRIVER_LOST:
            sink.driver_lost(drv, ns)

    def publish(self, frame: np.ndarray) -> None:
        self.frames_published += 1


class FrameComparison:
    """A tick listener: the first tick whose frame differs from the recorded one and in which field, and the
    largest absolute difference of any floating-point field over the whole replay (a recording made by
    another version of the plant's arithmetic differs in the last bits: this says by how much)."""

    def __init__(self, recorded_frames: np.ndarray) -> None:
        self.recorded = recorded_frames
        self.float_fields = [n for n in recorded_frames.dtype.names if recorded_frames.dtype[n].base.kind == "f"]
        self.k = 0
        self.first_tick = self.field = None
        self.max_difference, self.max_difference_field = 0.0, None

    def on_tick(self, record: np.ndarray, engine, actuation_ns: int) -> None:
        got, want = record[0]["frame"], self.recorded[self.k]
        if got.tobytes() != want.tobytes():
            if self.first_tick is None:
                self.first_tick = int(record[0]["tick"])
                self.field = next(n for n in want.dtype.names if got[n].tobytes() != want[n].tobytes())
            for name in self.float_fields:
                diff = float(np.max(np.abs(np.asarray(got[name]) - np.asarray(want[name]))))
                if not diff <= self.max_difference:     # also a NaN on one side
                    self.max_difference, self.max_difference_field = diff, name
        self.k += 1


def replay_recording(path: str, listeners=()) -> dict:
    """Replay ``path`` and compare its frames; ``listeners`` (``on_tick(record, engine, actuation_ns)``) see every
    replayed tick after the comparison (e.g. to read the plant's states the recording does not hold)."""
    reader = read_run_recording(path)
    header = reader.header
    cfg = service_config_from_dict(header["config"], header["config_path"])
    model, engine = build_tick_engine(cfg)
    if model.data_sha256 != header["model_data_sha256"]:
        raise RecordingError(f"{path}: recorded with other model data ({header['model_data_sha256'][:12]}…)")
    session = None if engine.stim is None else engine.stim.config.session_header()
    if header.get("stimulation_session") != session:     # the draw is the run's; a changed generator is refused
        raise RecordingError(f"{path}: the session's threshold factors drawn now differ from the recorded ones "
                             f"({header.get('stimulation_session')} vs {session})")
    ticks = reader.read("ticks")
    clamping = frozenset(i for i, ch in enumerate(engine.stim.channels if engine.stim is not None else ())
                         if ch.limit_policy == "clamp")
    driver = ReplayDriver(reader.read("commands"), clamping)
    engine.size_log([driver])
    comparison = FrameComparison(ticks["frame"])
    body = TickBody(engine, [driver], [comparison, *listeners])
    for rec in ticks:
        body.step(int(rec["tick"]), int(rec["start_ns"]), bool(rec["frame"]["status"] & STATUS_OVERRUN))
        body.emit()
    identical = comparison.first_tick is None
    return {"identical": identical, "ticks": comparison.k, "first_tick": comparison.first_tick,
            "field": comparison.field, "max_difference": comparison.max_difference,
            "max_difference_field": comparison.max_difference_field, "truncated": reader.truncated,
            **completeness(ticks, reader.warnings)}


def completeness(ticks: np.ndarray, warnings: list[str]) -> dict:
    """What the recording says it lacks: command-log entries the run could not record (the ticks'
    ``commands_unrecorded``) and tick records missing from the sequence; each also as a warning, since
    a replay cannot match the run past the first loss."""
    lost = ticks["commands_unrecorded"] if "commands_unrecorded" in (ticks.dtype.names or ()) else np.zeros(len(ticks))
    n_lost = int(lost.sum())
    first_lost = int(ticks["tick"][np.flatnonzero(lost)[0]]) if n_lost else None
    missing = int(ticks["tick"][-1] + 1 - len(ticks)) if len(ticks) else 0
    warnings = list(warnings)
    if n_lost:
        warnings.append(f"the run could not record {n_lost} command-log entries (first at tick {first_lost}); "
                        "the replay cannot match it from there on")
    if missing:
        warnings.append(f"{missing} tick records are missing from the recording")
    return {"commands_unrecorded": n_lost, "first_unrecorded_tick": first_lost, "ticks_missing": missing,
            "warnings": warnings}
