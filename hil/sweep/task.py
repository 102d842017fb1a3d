"""One run of a sweep (:mod:`hil.sweep.runner`): the task a worker runs (:func:`run_task`), picklable, and the
results row it returns, or the error row of a run that failed."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from hil.config import service_config_from_dict
from hil.reports.run_metrics import config_target, run_metrics
from hil.rt.offline import run_offline
from hil.service.build import ticks_for
from hil.sweep.spec import Variant, apply_overrides
from sim.das3.plant import PlantDivergedError
from sim.errors import UserInputError


@dataclass(frozen=True)
class RunTask:
    """One run, everything a worker needs (picklable)."""

    variant: Variant
    base: dict                 # the base config's merged document, one object shared by every task of a sweep
    config_path: str
    duration_s: float
    record_path: str | None
    band_rad: float
    sweep_path: str = ""

    @property
    def raw(self) -> dict:
        """The run's config document: a copy of the base with the variant's values set (built when needed, so
        a sweep holds one document, not one per run); a population's patient replaces the base's [patient]."""
        patient = self.variant.patient
        base = self.base if patient is None else {**self.base, "patient": patient.table}
        return apply_overrides(base, self.variant.values, self.sweep_path)


def blamed_key(exc: BaseException, swept: list[str]) -> str | None:
    """The swept key an input error is about (its config key, ``driver[0].kp`` read as ``driver.0.kp``, is that
    key or inside it); None if it is about no swept key."""
    key = getattr(exc, "key", None)
    if not isinstance(key, str):
        return None
    dotted = re.sub(r"\[(\d+)\]", r".\1", key)
    return next((k for k in swept if dotted == k or dotted.startswith(k + ".")), None)


def error_row(task: RunTask, exc: BaseException) -> dict:
    """The results row of a run that failed: the reason, blaming the sweep file's key when it is about one."""
    key = blamed_key(exc, list(task.variant.values))
    if key is not None:
        reason = getattr(exc, "reason", str(exc))
        where = "" if getattr(exc, "file", None) in (None, task.sweep_path) else f" (applied to {exc.file})"
        text = f"{task.sweep_path}, swept key {key!r}: {reason}{where}"
    else:
        text = f"{type(exc).__name__}: {exc}"
    return {"id": task.variant.id, **task.variant.columns, "status": "error", "error": text,
            "error_key": key or "", "input_error": isinstance(exc, UserInputError)}


class TickCollector:
    """Keeps every tick record of an offline run (allocated at the first tick) and the engine."""

    def __init__(self, n_ticks: int) -> None:
        self.n_ticks, self.ticks, self.n, self.engine = n_ticks, None, 0, None

    def on_tick(self, record: np.ndarray, engine, actuation_ns: int) -> None:
        if self.ticks is None:
            self.ticks, self.engine = np.zeros(self.n_ticks, record.dtype), engine
        self.ticks[self.n] = record[0]
        self.n += 1


def _degrees(value):
    return None if value is None else math.degrees(value)


def run_task(task: RunTask) -> dict:
    """Run one variant offline and return its results row (a worker's task)."""
    row = {"id": task.variant.id, **task.variant.columns}
    try:
        cfg = service_config_from_dict(task.raw, task.config_path)
        n_ticks = ticks_for(task.duration_s, cfg.loop.period_s)
        keep = TickCollector(n_ticks)
        result = run_offline(cfg, n_ticks, [keep], task.record_path)
    except (UserInputError, PlantDivergedError, ValueError) as exc:
        return error_row(task, exc)
    engine = keep.engine
    names = [c.name for c in engine.stim.channels] if engine.stim is not None else []
    dof_names = engine.plant.model.dof_names
    m = run_metrics(keep.ticks[:keep.n], cfg.loop.period_s, names, config_target(cfg, dof_names), task.band_rad)
    tr = m.get("tracking", {})
    row.update({"status": "ok", "error": "", "ticks": result.ticks, "simulated_s": result.ticks * cfg.loop.period_s,
                "wall_s": round(result.wall_s, 6), "stopped_by": result.stopped_by,
                "rms_error_deg": _degrees(tr.get("rms_error_rad")), "settling_time_s": tr.get("settling_time_s"),
                "overshoot_deg": _degrees(tr.get("overshoot_rad")), "final_error_deg": _degrees(tr.get("final_error_rad")),
                "gh_unstable_ticks": m["gh_unstable_ticks"], "gh_min_margin": m["gh_min_margin"],
                "watchdog_ticks": m["watchdog_ticks"], "recording": task.record_path or ""})
    row.update({f"charge_{name}_uc": q for name, q in m["charge_uc"].items()})
    return row
