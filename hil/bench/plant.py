"""``hil bench plant``: the time of one plant step, from the published equilibrium under a constant excitation."""
from __future__ import annotations

import gc
import os
import platform
import time

import numpy as np

from hil.bench.platform import cpu_model, steal_delta_ms, steal_s
from sim.das3.config import ModelConfig
from sim.das3.model import load_model
from sim.das3.phases import phase_medians_us
from sim.das3.plant import Plant

STEP_SIZES_DEFAULT = (0.004, 0.001)
"""Step sizes timed when none is given, s: the loop's default period and the shortest one."""


def time_steps(plant, u: np.ndarray, n_steps: int) -> np.ndarray:
    """Duration of each of ``n_steps`` plant steps, ns, with the cyclic GC off."""
    durations = np.empty(n_steps, dtype=np.int64)
    clock = time.perf_counter_ns
    gc_was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for i in range(n_steps):
            t0 = clock()
            plant.step(u)
            durations[i] = clock() - t0
    finally:
        if gc_was_enabled:
            gc.enable()
    return durations


def plant_bench(step_sizes, steps: int, excitation: float, scheme: str, cpu: int | None = None,
                model_config=None) -> dict:
    """Time ``steps`` steps per step size after the numba warm-up, pinned to ``cpu`` (None: not pinned): the
    machine and library versions, then ``results``, one dict per step size (median, p99 and max step time
    in µs, real-time factor, the per-phase medians of :func:`sim.das3.phases.phase_medians_us` and the
    hypervisor's steal on ``cpu`` while timing)."""
    import numba

    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    model = load_model(model_config or ModelConfig())
    u = np.full(len(model.muscle_names), excitation)
    results = []
    for h in step_sizes:
        plant = Plant(model, step_s=h, scheme=scheme)
        plant.warmup()
        steal_before = steal_s(cpu) if cpu is not None else None
        durations = time_steps(plant, u, steps)
        phases = phase_medians_us(plant, u)
        steal_after = steal_s(cpu) if cpu is not None else None
        results.append({
            "step_s": h,
            "median_step_us": float(np.median(durations)) / 1e3,
            "p99_step_us": float(np.percentile(durations, 99)) / 1e3,
            "max_step_us": float(durations.max()) / 1e3,
            "realtime_factor": steps * h / (float(durations.sum()) * 1e-9),
            "phases_us": phases,
            "steal_ms": steal_delta_ms(steal_before, steal_after),
        })
    return {"cpu": cpu_model(), "cpu_count": os.cpu_count(), "pinned_cpu": cpu, "python": platform.python_version(),
            "numpy": np.__version__, "numba": numba.__version__, "steps": steps,
            "excitation": excitation, "scheme": scheme, "muscle_model": model.config.muscle_model,
            "results": results}
