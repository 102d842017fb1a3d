"""``hil bench loop``: a loopback run at a given period while this process scrapes its metrics endpoint.

The run is a real service run (:class:`hil.service.supervisor.ServiceRun`: exporter here, loop in its own
real-time process) on a config written from :data:`LOOP_CONFIG`; scraping is what a Prometheus server
does to the exporter during an experiment, so its cost shows in the loop's lateness if it leaks there.
"""
from __future__ import annotations

import os
import tempfile
import urllib.request
from pathlib import Path

from hil.bench.platform import cpu_model, free_port, steal_delta_ms, steal_s
from hil.config import ConfigOverrides, min_substeps
from hil.service import build as service
from hil.service.supervisor import ServiceRun
from hil.view.host import ViewHost, ViewOptions

LOOP_CONFIG = """
[loop]
period_ms = {period_ms}
substeps = {substeps}
spin_us = {spin_us}
cpu = {cpu}
priority = {priority}
[stimulation]
mode = "direct"
[safety]
watchdog_timeout_ms = 1000
[metrics]
enabled = true
port = {port}
[recording]
enabled = false
[[driver]]
type = "loopback"
controller = "playback"
file = "excitation.csv"
direct = true
rate_hz = 50
"""

LOOP_PRIORITY = 80
"""SCHED_FIFO priority of the benchmark's loop (the ``[loop] priority`` default)."""

EXCITATION_CSV = ("time,bicl,bicb1,bicb2,triclong1\n0,0.05,0.05,0.05,0.02\n"
                  "1,0.3,0.3,0.3,0.1\n2,0.05,0.05,0.05,0.02\n")
"""The loopback controller's schedule: biceps and triceps excitation rise and fall, so the plant moves."""


def loop_cpu() -> int:
    """The loop's CPU: the last one, so the supervisor and the exporter run elsewhere."""
    return (os.cpu_count() or 1) - 1


def write_loop_config(work: Path, period_s: float, spin_us: float, cpu: int, port: int) -> Path:
    """The benchmark's service config and its excitation file in ``work``; returns the config's path."""
    (work / "excitation.csv").write_text(EXCITATION_CSV)
    cfg_path = work / "bench.toml"
    cfg_path.write_text(LOOP_CONFIG.format(period_ms=period_s * 1e3, substeps=min_substeps(period_s), port=port,
                                           cpu=cpu, spin_us=spin_us, priority=LOOP_PRIORITY))
    return cfg_path


def _scraped_run(cfg_path: Path, duration_s: float, scrape_interval_s: float, cpu: int,
                 view_port: int | None = None, overrides: ConfigOverrides = ConfigOverrides()) -> tuple:
    """Run the service to its end, scraping ``/metrics`` every ``scrape_interval_s`` while it runs (and serving
    the live view on ``view_port`` when given): (run summary, scrapes, failed scrapes, steal on ``cpu``
    before, after)."""
    run = ServiceRun(str(cfg_path), duration_s, overrides=overrides,
                     view=None if view_port is None else ViewHost(ViewOptions(view_port)))
    steal_before = steal_s(cpu)
    scrapes = failures = 0
    try:
        run.start()
        url = f"http://{run.metrics.address}/metrics"     # the configured port, or the free one the run took
        while run.alive(scrape_interval_s if scrape_interval_s > 0 else 0.5):
            if scrape_interval_s > 0 and run.status.state == service.STATE_RUNNING:
                try:
                    urllib.request.urlopen(url, timeout=1).read()
                    scrapes += 1
                except OSError:
                    failures += 1
        steal_after = steal_s(cpu)
        summary = {**run.result(5.0).to_dict(), "patient": run.cfg.patient.name}
    finally:
        run.close()
    return summary, scrapes, failures, steal_before, steal_after


def loop_bench(period_s: float, duration_s: float, scrape_interval_s: float, spin_us: float, cpu: int,
               view_port: int | None = None, patient: dict | None = None) -> dict:
    """One scraped loopback run on ``cpu`` (with the live view on ``view_port`` when given): tick lateness
    percentiles (µs), the engine's compute time per tick (``compute_us``: p50, p99, p99.9, max) and the median
    of each phase of a tick (``tick_phases_us``), misses, scrapes, CPU use of the real-time process,
    hypervisor steal on its CPU; ``{"error": ...}`` if the run failed. ``patient``: a ``[patient]`` table
    (:func:`hil.patients.patient_override`)."""
    work = Path(tempfile.mkdtemp(prefix="hil-bench-"))
    port = free_port()
    cfg_path = write_loop_config(work, period_s, spin_us, cpu, port)
    summary, scrapes, failures, steal_before, steal_after = _scraped_run(cfg_path, duration_s,
                                                                         scrape_interval_s, cpu, view_port,
                                                                         ConfigOverrides(patient=patient))
    if not summary.get("ok"):
        return {"error": summary["error"]}
    lat = summary["lateness_us"]
    steal_ms = steal_delta_ms(steal_before, steal_after)
    return {"period_s": period_s, "duration_s": duration_s, "spin_us": spin_us, "ticks": summary["ticks"],
            "p50_us": lat["p50"], "p99_us": lat["p99"], "p999_us": lat["p99.9"], "max_us": lat["max"],
            "compute_us": summary["compute_us"], "tick_phases_us": summary["tick_phases_us"],
            "misses_over_1ms": summary["late_over_1ms"], "deadline_misses": summary["deadline_misses"],
            "scrapes": scrapes, "scrape_failures": failures,
            "cpu_percent": 100.0 * summary["cpu_s"] / max(summary["wall_s"], 1e-9),
            "steal_ms_loop_cpu": steal_ms, "realtime": summary["realtime"], "cpu": cpu_model(), "view_port": view_port,
            "patient": summary["patient"]}
