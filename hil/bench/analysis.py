"""``hil bench analysis``: wall time and iteration counts of the analyses (issue 36 item 5: each maximum-moment
task's default sweep <= 60 s, one static-optimisation posture <= 1 s, on the machine it runs on), with the
CPU and the hypervisor steal over the run, since the times depend on both."""
from __future__ import annotations

import math
import os
import platform
import resource
import time

import numpy as np

from hil.bench.platform import cpu_model, steal_s
from sim.analysis import max_moment as mm
from sim.analysis import static_opt as so
from sim.analysis.multistart import default_workers
from sim.analysis.muscle_problem import load_kernels
from sim.das3.model import load_model

STATIC_ELEVATIONS_DEG = (30.0, 60.0, 90.0)
"""Humeral elevations of the static-optimisation postures (plane of elevation 60 deg, the published
equilibrium's elbow and forearm, no load)."""
STATIC_PLANE_DEG = 60.0


def default_angles_deg(task: mm.Task, every: int = 1) -> np.ndarray:
    """The task's default sweep (start, stop inclusive, step), every ``every``-th angle, deg."""
    start, stop, step = task.default_angles_deg
    return np.arange(start, stop + step / 2, step)[::every]


def total_steal_s() -> float | None:
    """Steal summed over all CPUs, s (None where the kernel does not report it)."""
    readings = [steal_s(cpu) for cpu in range(os.cpu_count() or 1)]
    return None if any(r is None for r in readings) else sum(readings)


def cpu_time_s() -> float:
    """CPU time of this process and of its finished child processes (a sweep's workers), s."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def _steal_ms(before: float | None) -> float | None:
    after = total_steal_s()
    return None if before is None or after is None else round((after - before) * 1e3, 1)


def bench_sweep(model, task_name: str, every: int, workers: int = 1) -> dict:
    """One task's sweep (:func:`sim.analysis.max_moment.sweep`, its default settings on ``workers``
    processes, as ``hil analyze max-moment`` runs it): wall time, CPU time (this process and its workers), the
    number of solves (every start of every pass) and, per angle, the returned point's moment, iterations, time
    and checks."""
    angles = default_angles_deg(mm.TASKS[task_name], every)
    steal, t0, cpu0 = total_steal_s(), time.perf_counter(), cpu_time_s()
    points = mm.sweep(model, mm.TASKS[task_name], np.radians(angles), mm.SweepSettings(workers=workers))
    wall, cpu = time.perf_counter() - t0, cpu_time_s() - cpu0
    optima = [getattr(p, "optima", None) for p in points]
    solves = sum(len(o.found) + len(o.failed) for o in optima if o is not None)
    return {"task": task_name, "wall_s": wall, "cpu_s": cpu, "workers": workers, "solves": solves, "steal_ms": _steal_ms(steal),
            "points": [_point_row(a, p) for a, p in zip(angles, points)]}


def _point_row(angle_deg: float, point) -> dict:
    """A sweep's point (a MaxMomentPoint, or the StaticOptError of an angle with no checked solution)."""
    checked = isinstance(point, mm.MaxMomentPoint)
    sol = point.solution
    return {"angle_deg": float(angle_deg), "moment_Nm": point.moment_nm if checked else math.nan,
            "iterations": None if sol is None else sol.iterations, "solve_s": None if sol is None else sol.time_s,
            "passed": checked and sol.checks.passed}


def bench_static(model, criterion: str, elevation_deg: float) -> dict:
    """One static-optimisation posture from a cold start: time, iterations, cost and checks."""
    eq = model.equilibrium_state
    posture = so.Posture(math.radians(STATIC_PLANE_DEG), math.radians(elevation_deg), 0.0, float(eq[9]),
                         float(eq[10]))
    t0 = time.perf_counter()
    try:
        sol, passed = so.solve_static(model, posture, criterion=criterion), True
    except so.StaticOptError as exc:
        sol, passed = exc.solution, False
    return {"criterion": criterion, "elevation_deg": elevation_deg, "wall_s": time.perf_counter() - t0,
            "iterations": sol.iterations if sol is not None else None,
            "cost": sol.cost if sol is not None else math.nan, "passed": passed}


def _load_kernels(model) -> None:
    """Load every compiled kernel a solve calls (one evaluation of the model at rest and its output Jacobians,
    and criterion (c)'s kernels), so that no timed solve pays for loading them."""
    eq = model.equilibrium_state
    posture = so.Posture(0.0, math.radians(30.0), 0.0, float(eq[9]), float(eq[10]))
    rest, z0, _ = so.rest_problem(model, posture, None, 0.0, None, 0)
    rest.at(z0)
    rest.output_jacobians(z0)
    load_kernels(model)


def analysis_bench(task_names, every: int, criteria: str, elevations_deg) -> dict:
    """Every requested sweep and static-optimisation posture, timed one after the other (the sweeps on
    :func:`sim.analysis.multistart.default_workers` processes; the model's compiled kernels are loaded and
    loaded first, :func:`_load_kernels`)."""
    import numba

    model = load_model()
    _load_kernels(model)
    steal = total_steal_s()
    statics = [bench_static(model, c, e) for c in criteria for e in elevations_deg]
    workers = default_workers()
    sweeps = [bench_sweep(model, name, every, workers) for name in task_names]
    return {"cpu": cpu_model(), "cpu_count": os.cpu_count(), "workers": workers, "load_average": os.getloadavg(),
            "python": platform.python_version(), "numpy": np.__version__, "numba": numba.__version__,
            "static": statics, "sweeps": sweeps, "steal_ms": _steal_ms(steal)}
