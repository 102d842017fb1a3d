"""``hil bench plant``: the time of one plant step, from the published equilibrium under a constant excitation or
one drawn anew at a controller's rate (``change_ms``)."""
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
SCHEDULE_SEED = 1
"""Seed of the drawn excitations (the same schedule in every run)."""


def excitation_schedule(n_muscles: int, n_steps: int, excitation: float, every: int | None) -> list[np.ndarray]:
    """The excitation of each of ``n_steps`` steps: ``excitation`` for every element throughout (``every`` None),
    or drawn anew every ``every`` steps, each element uniform in [0, 2 excitation] clipped to 1 (mean
    ``excitation`` below 0.5), as a controller's or a policy's commands change the excitations."""
    if every is None:
        return [np.full(n_muscles, excitation)] * n_steps
    rng = np.random.default_rng(SCHEDULE_SEED)
    held = [np.minimum(rng.uniform(0.0, 2.0 * excitation, n_muscles), 1.0) for _ in range(-(-n_steps // every))]
    return [held[i // every] for i in range(n_steps)]


def time_steps(plant, schedule: list[np.ndarray]) -> np.ndarray:
    """Duration of each plant step, ns, the step's excitation from ``schedule``, with the cyclic GC off."""
    durations = np.empty(len(schedule), dtype=np.int64)
    clock = time.perf_counter_ns
    gc_was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for i, u in enumerate(schedule):
            t0 = clock()
            plant.step(u)
            durations[i] = clock() - t0
    finally:
        if gc_was_enabled:
            gc.enable()
    return durations


def plant_bench(step_sizes, steps: int, excitation: float, scheme: str, cpu: int | None = None,
                model_config=None, change_s: float | None = None) -> dict:
    """Time ``steps`` steps per step size after the numba warm-up, pinned to ``cpu`` (None: not pinned), under
    :func:`excitation_schedule` (drawn anew every ``change_s`` seconds, or constant): the machine and library
    versions, then ``results``, one dict per step size (median, p99 and max step time in µs, real-time
    factor, the per-phase medians of :func:`sim.das3.phases.phase_medians_us` and the hypervisor's steal on
    ``cpu`` while timing)."""
    import numba

    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    model = load_model(model_config or ModelConfig())
    results = []
    for h in step_sizes:
        every = None if change_s is None else max(1, round(change_s / h))
        schedule = excitation_schedule(len(model.muscle_names), steps, excitation, every)
        plant = Plant(model, step_s=h, scheme=scheme)
        plant.warmup()
        steal_before = steal_s(cpu) if cpu is not None else None
        durations = time_steps(plant, schedule)
        phases = phase_medians_us(plant, schedule[-1])
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
            "excitation": excitation, "change_ms": None if change_s is None else change_s * 1e3, "scheme": scheme, "muscle_model": model.config.muscle_model,
            "results": results}
