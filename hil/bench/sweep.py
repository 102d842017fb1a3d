"""``hil bench sweep``: how close ``hil sweep`` on N workers comes to N times one process.

The sweep (a file, or :func:`default_spec`) runs through :func:`hil.sweep.runner.run_sweep` on Dask into a temporary
directory: a local cluster started here, its workers warmed (:class:`hil.sweep.worker.WarmUp`) before the sweep
and that start-up timed apart, or an existing one (``scheduler``), which the sweep warms within its wall time.
The sweep's wall time runs from the call to the last result. Three single-run totals, each divided by the worker
threads, give the ideal wall time and so the efficiency (ideal / measured; the ratio is its inverse):

- ``single_run_total_s``: the results rows' ``wall_s``, the ticks' time measured inside the workers (the
  issue's "total single-run time"; contention between workers inflates it, engine set-up is not in it);
- ``serial``: whole runs back to back in this process before the sweep, the first (imports, numba) apart;
- ``tasks``: each task's compute time on its worker (the Dask task stream): how busy the workers were, and
  per worker its warm-up (imports, numba cache loads and compiles, the model), its first task and the median
  of the later ones.

During the sweep, from this machine's /proc/stat (with a remote scheduler, not the workers' machines): the
hypervisor's steal, the idle time, and the busy time beyond the CPU time of the workers and of this process
(scheduler, client): other load on a shared machine.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from hil.bench.platform import cpu_model, steal_delta_ms, steal_s
from hil.sweep.runner import run_sweep, run_task, tasks
from hil.sweep.spec import SweepSpec, variants
from hil.sweep.worker import WARM_UP_CANDIDATES, WarmUp, local_cluster, warm_up, warm_ups

if TYPE_CHECKING:
    from hil.sweep.runner import RunTask

DEFAULT_RUNS = 64
DEFAULT_DURATION_S = 5.0
DEFAULT_BASE = Path(__file__).resolve().parents[2] / "configs" / "elbow-hold.toml"
BUILTIN_PATH = "(the built-in sweep of hil bench sweep)"
GOAL_RATIO = 1.3
"""The issue's goal: sweep wall time within this factor of (single-run total / workers)."""


def default_spec(runs: int = DEFAULT_RUNS, duration_s: float = DEFAULT_DURATION_S) -> SweepSpec:
    """``configs/elbow-hold.toml`` over a grid of proportional gains (40-180 mA/rad) times sensor-noise seeds
    (0.5 deg of angle noise), ``runs`` variants in all (64: 8 x 8; a prime count is one gain x its seeds)."""
    seeds = max(d for d in range(1, math.isqrt(runs) + 1) if runs % d == 0)
    gains = runs // seeds
    kp = [round(40.0 + 140.0 * i / max(gains - 1, 1), 1) for i in range(gains)]
    return SweepSpec(path=BUILTIN_PATH, base=str(DEFAULT_BASE), duration_s=float(duration_s),
                     keep_recordings=False, settling_band_rad=math.radians(2.0),
                     grid={"driver.0.kp_ma_per_rad": kp, "sensor.seed": list(range(seeds)),
                           "sensor.angle_noise_deg": [0.5]})


def with_duration(spec: SweepSpec, duration_s: float | None) -> SweepSpec:
    return spec if duration_s is None else dataclasses.replace(spec, duration_s=float(duration_s))


def _steal_per_cpu() -> dict:
    return {f"cpu{c}": steal_s(c) for c in range(os.cpu_count() or 1)}


def _steal_ms(before: dict, after: dict) -> tuple[float | None, dict]:
    """Total and per-CPU steal between two :func:`_steal_per_cpu` readings, ms (None where unknown)."""
    per_cpu = {c: steal_delta_ms(before[c], after[c]) for c in before}
    known = [ms for ms in per_cpu.values() if ms is not None]
    return (round(sum(known), 1) if known else None), per_cpu


def _cpu_s() -> tuple[float, float] | None:
    """The machine's busy (user, nice, system, irq, softirq) and idle (with iowait) time over all CPUs
    (/proc/stat ``cpu`` line), s; None where unknown."""
    try:
        with open("/proc/stat", encoding="utf-8") as fh:
            f = [int(v) for v in fh.readline().split()[1:8]]
    except (OSError, ValueError):
        return None
    tick = os.sysconf("SC_CLK_TCK")
    return (f[0] + f[1] + f[2] + f[5] + f[6]) / tick, (f[3] + f[4]) / tick


def _cpu_use(before, after, workers_s: float, own_s: float) -> dict:
    """CPU seconds during the sweep: the machine's busy and idle time (None where unknown), the workers'
    processes, this process, and ``others``: busy time beyond both."""
    doc = {"busy": None, "idle": None, "workers": workers_s, "this_process": own_s, "others": None}
    if before is not None and after is not None:
        busy, idle = after[0] - before[0], after[1] - before[1]
        doc.update(busy=busy, idle=idle, others=max(busy - workers_s - own_s, 0.0))
    return doc


def _ratios(total_s: float, slots: int, wall_s: float) -> dict:
    """The ideal wall time ``total_s / slots``, its efficiency (ideal / ``wall_s``) and ratio (None if 0)."""
    ideal = total_s / slots
    return {"total_s": total_s, "ideal_wall_s": ideal, "efficiency": ideal / wall_s,
            "ratio": wall_s / ideal if ideal > 0 else None}


def serial_reference(spec: SweepSpec, n: int, work_dir: str) -> dict:
    """``n`` variants spread over the sweep, whole runs back to back in this process: the first apart (it
    imports and compiles), ``per_run_s`` the mean of the others (the first alone if ``n`` is 1)."""
    runs = variants(spec)
    n = min(n, len(runs))
    chosen = [runs[i * len(runs) // n] for i in range(n)]
    times, rows = [], []
    before = _steal_per_cpu()
    for task in tasks(spec, chosen, work_dir):
        t0 = time.perf_counter()
        rows.append(run_task(task))
        times.append(time.perf_counter() - t0)
    steal_ms, _ = _steal_ms(before, _steal_per_cpu())
    later = times[1:] or times
    ticks = [r["wall_s"] for r in rows if r["status"] == "ok"]
    return {"runs": n, "first_run_s": times[0], "run_s": times, "per_run_s": statistics.fmean(later),
            "ticks_wall_s": statistics.fmean(ticks) if ticks else None, "steal_ms": steal_ms,
            "errors": [r["error"] for r in rows if r["status"] != "ok"]}


def task_times(records: list[dict], slots: int, wall_s: float, warm_ups: dict, start: float) -> dict | None:
    """From the Dask task stream of the sweep's tasks: the summed compute time (with its efficiency) and per
    worker its task count, its warm-up (``warm_ups``, by address, :func:`hil.sweep.worker.warm_ups`): how long and
    whether it ended within the sweep (after ``start``, by ``time.time()``), None if unknown; the first task's
    time and the median of the later ones."""
    by_worker: dict[str, list] = {}
    for rec in records:
        if not str(rec.get("key", "")).startswith("hil-run-"):
            continue
        for ss in rec.get("startstops", ()):
            if ss.get("action") == "compute":
                by_worker.setdefault(rec.get("worker", "?"), []).append((ss["start"], ss["stop"] - ss["start"]))
    if not by_worker:
        return None
    per_worker = []
    for worker, spans in sorted(by_worker.items()):
        spans.sort()
        later = [d for _, d in spans[1:]]
        warm = warm_ups.get(worker)
        per_worker.append({"worker": worker, "tasks": len(spans), "warm_up_s": warm and warm["seconds"],
                           "warm_up_in_wall": warm and warm["finished"] > start, "first_s": spans[0][1],
                           "later_median_s": statistics.median(later) if later else None})
    total = sum(d for spans in by_worker.values() for _, d in spans)
    return {**_ratios(total, slots, wall_s), "per_worker": per_worker}


def _rows(out_dir: str) -> list[dict]:
    with open(os.path.join(out_dir, "results.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _connect(workers: int | None, scheduler: str | None, warm_tasks: list[RunTask]) -> tuple:
    """(local cluster or None, client, its start-up in s or None, the warm-up's part of it in s or None): a local
    cluster is started and its workers warmed (:func:`hil.sweep.worker.warm_up`) here, before the measured
    sweep; an existing cluster is warmed by the sweep itself, within its wall time."""
    from distributed import Client

    if scheduler is not None:
        return None, Client(scheduler), None, None
    workers = workers or os.cpu_count() or 1
    t0 = time.perf_counter()
    cluster = local_cluster(workers, dashboard_address=":0")
    try:
        client = Client(cluster)
        client.wait_for_workers(workers)
        t_warm = time.perf_counter()
        warm_up(client, warm_tasks)
    except BaseException:
        cluster.close()
        raise
    t_end = time.perf_counter()
    return cluster, client, t_end - t0, t_end - t_warm


def _measured_sweep(client, spec: SweepSpec, out_dir: str, progress, warm_up_name: str) -> dict:
    """:func:`hil.sweep.runner.run_sweep` on ``client``'s cluster: its wall time to the last result, rows, task stream,
    steal and CPU use in that time, its ``start`` (``time.time()``) and then each worker's warm-up under the
    plugin ``warm_up_name`` (:func:`hil.sweep.worker.warm_ups`)."""
    from distributed import get_task_stream

    end = {}

    def on_row(row, done, total):
        if done == total:
            end.update(t=time.perf_counter(), steal=_steal_per_cpu(), cpu=_cpu_s(), own=time.process_time())
        if progress is not None:
            progress(done, total)

    workers_cpu = client.run(time.process_time)
    steal, cpu, own = _steal_per_cpu(), _cpu_s(), time.process_time()
    with get_task_stream(client=client) as stream:
        t0, start = time.perf_counter(), time.time()
        summary = run_sweep(spec, out_dir, 1, client.scheduler.address, on_row)
    workers_cpu = sum(t - workers_cpu[w] for w, t in client.run(time.process_time).items() if w in workers_cpu)
    steal_ms, steal_per_cpu = _steal_ms(steal, end["steal"])
    return {"wall_s": end["t"] - t0, "run_sweep_wall_s": summary["wall_s"], "rows": _rows(out_dir),
            "records": stream.data, "steal_ms": steal_ms, "steal_ms_per_cpu": steal_per_cpu,
            "cpu_s": _cpu_use(cpu, end["cpu"], workers_cpu, end["own"] - own),
            "warm_ups": warm_ups(client, warm_up_name), "start": start}


def sweep_bench(spec: SweepSpec, workers: int | None = None, scheduler: str | None = None, serial_runs: int = 8,
                progress=None) -> dict:
    """Run ``spec`` on a local cluster of ``workers`` processes (one thread each; default: one per CPU) or on
    ``scheduler``'s cluster, after ``serial_runs`` whole runs in this process (0: none); returns the figures of
    the module's docstring. ``progress(done, total)`` after each result."""
    import dask
    import distributed
    import numba

    runs = variants(spec)
    n_runs = len(runs)
    with tempfile.TemporaryDirectory(prefix="hil-bench-sweep-") as work:
        serial = serial_reference(spec, serial_runs, os.path.join(work, "serial")) if serial_runs > 0 else None
        warm_tasks = tasks(spec, runs[:WARM_UP_CANDIDATES], os.path.join(work, "sweep"))   # as hil sweep warms
        cluster, client, startup, warm_s = _connect(workers, scheduler, warm_tasks)
        try:
            nthreads, address = client.nthreads(), client.scheduler.address
            m = _measured_sweep(client, spec, os.path.join(work, "sweep"), progress, WarmUp(warm_tasks).name)
        finally:
            client.close()
            if cluster is not None:
                cluster.close()
    slots, wall, rows = sum(nthreads.values()), m["wall_s"], m["rows"]
    ok = [r for r in rows if r["status"] == "ok"]
    main = _ratios(sum(r["wall_s"] for r in ok), slots, wall)
    return {
        "sweep": {"file": None if spec.path == BUILTIN_PATH else spec.path, "base": spec.base,
                  "runs": n_runs, "duration_s": spec.duration_s, "keys": spec.keys},
        "cpu": cpu_model(), "cpu_count": os.cpu_count(), "python": platform.python_version(),
        "numba": numba.__version__, "dask": dask.__version__, "distributed": distributed.__version__,
        "scheduler": address, "local_cluster": cluster is not None, "workers": len(nthreads), "threads": slots,
        "startup_s": startup, "warm_up_s": warm_s, "wall_s": wall, "run_sweep_wall_s": m["run_sweep_wall_s"],
        "results": len(rows), "ok_runs": len(ok), "error_runs": len(rows) - len(ok),
        "errors": [r["error"] for r in rows if r["status"] != "ok"][:5],
        "single_run_total_s": main["total_s"], "ideal_wall_s": main["ideal_wall_s"],
        "efficiency": main["efficiency"], "ratio": main["ratio"], "goal_ratio": GOAL_RATIO,
        "meets_goal": main["ratio"] is not None and main["ratio"] <= GOAL_RATIO,
        "efficiency_with_startup": None if startup is None else main["ideal_wall_s"] / (wall + startup),
        "serial": None if serial is None else {**serial, **_ratios(serial["per_run_s"] * n_runs, slots, wall)},
        "tasks": task_times(m["records"], slots, wall, m["warm_ups"], m["start"]),
        "steal_ms": m["steal_ms"], "steal_ms_per_cpu": m["steal_ms_per_cpu"], "cpu_s": m["cpu_s"],
    }
