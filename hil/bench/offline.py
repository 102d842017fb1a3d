"""``hil bench offline``: the throughput of offline runs (simulated seconds per wall second) of one config,
several runs back to back in this process, pinned to one CPU, each recording as ``hil run --offline`` does.

One run says little on a shared machine: another tenant's burst can slow a fraction-of-a-second run
noticeably without the hypervisor reporting steal. The benchmark therefore repeats the run and reports every figure, the
median and the best, with the steal over all of them.
"""
from __future__ import annotations

import os
import platform
import tempfile
from pathlib import Path

import numpy as np

from hil.bench.platform import cpu_model, steal_delta_ms, steal_s
from hil.config import load_service_config, with_patient
from hil.rt.offline import run_offline
from hil.service import build as service
from sim.errors import UserInputError

DEFAULT_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "elbow-hold.toml"
GOAL_FACTOR = 100.0
"""Issue 18's goal for the DAS3 elbow hold at 4 ms: at least this many times real time on one core."""


def offline_bench(config: Path, duration_s: float, runs: int, record: bool = True, cpu: int | None = None,
                  patient: dict | None = None) -> dict:
    """``runs`` offline runs of ``duration_s`` simulated seconds of ``config`` (each after its engine's warm-up,
    which is not timed), pinned to ``cpu`` (None: not pinned). Returns the machine, each run's real-time
    factor and wall time, their median and best, and the steal on ``cpu`` over all runs. ``patient``: a
    ``[patient]`` table replacing the config's (:func:`hil.patients.patient_override`)."""
    import numba

    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    cfg = with_patient(load_service_config(str(config)), patient)
    n_ticks = service.ticks_for(duration_s, cfg.loop.period_s)
    factors, walls = [], []
    steal_before = steal_s(cpu) if cpu is not None else None
    with tempfile.TemporaryDirectory(prefix="hil-bench-offline-") as work:
        for k in range(runs):
            path = os.path.join(work, f"run{k}.hilrec") if record else None
            result = run_offline(cfg, n_ticks, record_path=path)
            if result.ticks != n_ticks:
                raise UserInputError(f"run {k + 1} stopped early ({result.stopped_by}: {result.stop_detail}), "
                                   "so its throughput is not that of the config")
            walls.append(result.wall_s)
            factors.append(n_ticks * cfg.loop.period_s / result.wall_s)
            if path is not None:
                os.remove(path)
    steal_after = steal_s(cpu) if cpu is not None else None
    median = float(np.median(factors))
    return {"cpu": cpu_model(), "cpu_count": os.cpu_count(), "pinned_cpu": cpu, "python": platform.python_version(),
            "numpy": np.__version__, "numba": numba.__version__, "config": str(config), "patient": cfg.patient.name,
            "period_s": cfg.loop.period_s, "simulated_s": n_ticks * cfg.loop.period_s, "recording": record,
            "realtime_factors": factors, "wall_s": walls, "median_factor": median, "best_factor": max(factors),
            "goal_factor": GOAL_FACTOR, "steal_ms": steal_delta_ms(steal_before, steal_after)}
