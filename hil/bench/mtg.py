"""``hil bench mtg``: the reduced MTG arm's step time, per Python call (as :mod:`hil.bench.plant` times the DAS3
plant) and inside one compiled call of many steps (as the tick kernel steps it)."""
from __future__ import annotations

import os
import platform
import time

import numpy as np

from hil.bench.plant import time_steps
from hil.bench.platform import cpu_model, steal_delta_ms, steal_s
from sim.das3.model import load_model
from sim.mtg.model import load_mtg_model
from sim.mtg.plant import MtgPlant
from sim.mtg.step import mtg_steps


def _in_kernel_us(plant, u: np.ndarray, steps: int, repeats: int = 5) -> float:
    """Median over ``repeats`` of the mean step time of ``steps`` steps in one compiled call, µs."""
    bundle, x, u_applied, loads, h = plant.kernel_args
    A, W = plant.model.arrays, plant.workspace
    times = []
    for _ in range(repeats):
        saved = x.copy()
        t0 = time.perf_counter_ns()
        status, _, done = mtg_steps(A, W, x, u_applied, u, loads, h, steps)
        times.append((time.perf_counter_ns() - t0) / max(done, 1) / 1e3)
        x[:] = saved
        if status != 0:
            raise RuntimeError(f"the MTG arm failed after {done} steps (status {status})")
    return float(np.median(times))


def mtg_bench(step_sizes, steps: int, excitation: float, cpu: int | None = None, parameters=None) -> dict:
    """Per step size: median, p99, max of single steps through :meth:`MtgPlant.step` and the mean step inside
    one compiled call, µs, the real-time factor and the steal on ``cpu`` while timing."""
    import numba

    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    model = load_mtg_model(load_model(), parameters)
    u = np.full(model.n_muscles, excitation)
    results = []
    for h in step_sizes:
        plant = MtgPlant(model, step_s=h)
        plant.warmup()
        _in_kernel_us(plant, u, 10, 1)
        steal_before = steal_s(cpu) if cpu is not None else None
        durations = time_steps(plant, [u] * steps)
        plant.reset()
        kernel_us = _in_kernel_us(plant, u, steps)
        steal_after = steal_s(cpu) if cpu is not None else None
        results.append({"step_s": h, "median_step_us": float(np.median(durations)) / 1e3,
                        "p99_step_us": float(np.percentile(durations, 99)) / 1e3,
                        "max_step_us": float(durations.max()) / 1e3, "in_kernel_step_us": kernel_us,
                        "realtime_factor": h / (kernel_us * 1e-6),
                        "steal_ms": steal_delta_ms(steal_before, steal_after)})
    return {"cpu": cpu_model(), "cpu_count": os.cpu_count(), "pinned_cpu": cpu, "python": platform.python_version(),
            "numpy": np.__version__, "numba": numba.__version__, "steps": steps, "excitation": excitation,
            "n_mtg": model.n_muscles, "results": results}
