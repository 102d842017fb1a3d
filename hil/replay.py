"""Offline replay of a recording: rebuild the run from its recorded config, feed the recorded commands
at the ticks they were latched, and compare every sensor frame bit for bit."""
from __future__ import annotations

import numpy as np

from drivers.base import KIND_CHANNEL, KIND_DRIVER_LOST, KIND_EXCITATION, KIND_HEARTBEAT
from hil.config import service_config_from_dict
from hil.recording import RecordingError, RecordingReader
from hil.sensor import STATUS_OVERRUN


def replay_recording(path: str) -> dict:
    from hil.service import build_engine

    reader = RecordingReader(path)
    header = reader.header
    cfg = service_config_from_dict(header["config"], header["config_path"])
    model, engine, drivers = build_engine(cfg)
    for d in drivers:
        d.shutdown()  # replay feeds the recorded commands, not the controllers
    if model.data_sha256 != header["model_data_sha256"]:
        raise RecordingError(f"{path}: recorded with other model data ({header['model_data_sha256'][:12]}…)")
    ticks = reader.read("ticks")
    commands = reader.read("commands")
    order = np.argsort(commands["tick"], kind="stable")
    commands = commands[order]
    starts = np.searchsorted(commands["tick"], ticks["tick"], side="left")
    ends = np.searchsorted(commands["tick"], ticks["tick"], side="right")
    for k, rec in enumerate(ticks):
        tick = int(rec["tick"])
        engine.begin(tick, bool(rec["frame"]["status"] & STATUS_OVERRUN))
        for c in commands[starts[k]:ends[k]]:
            if c["status"] != 0 and c["kind"] != KIND_CHANNEL:
                continue  # rejected: had no effect
            drv, ns, idx, v = int(c["driver"]), int(c["receive_ns"]), int(c["index"]), c["values"]
            if c["kind"] == KIND_CHANNEL:
                if c["status"] == 0 or engine.stim is None or engine.stim.channels[idx].limit_policy == "clamp":
                    engine.channel(drv, ns, idx, float(v[0]), float(v[1]), float(v[2]), int(v[3]))
            elif c["kind"] == KIND_EXCITATION:
                engine.excitation(drv, ns, idx, float(v[0]))
            elif c["kind"] == KIND_HEARTBEAT:
                engine.heartbeat(drv, ns)
            elif c["kind"] == KIND_DRIVER_LOST:
                engine.driver_lost(drv, ns)
        result = engine.step()
        got, want = result.frame[0], rec["frame"]
        if got.tobytes() != want.tobytes():
            field = next(n for n in want.dtype.names if got[n].tobytes() != want[n].tobytes())
            return {"identical": False, "ticks": k + 1, "first_tick": tick, "field": field,
                    "truncated": reader.truncated, **completeness(ticks, reader.warnings)}
    return {"identical": True, "ticks": len(ticks), "first_tick": None, "field": None,
            "truncated": reader.truncated, **completeness(ticks, reader.warnings)}


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
