"""``hil bench sweep`` (hil.bench.sweep): the figures of a tiny sweep on a real two-worker local cluster are
consistent with each other (its workers warmed within the start-up), error rows fail the benchmark, bad options
are refused. Nothing here is timed."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import write_sweep
from typer.testing import CliRunner

from hil.bench.sweep import default_spec
from hil.cli import app
from hil.sweep.spec import variants

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "configs" / "elbow-hold.toml"


def _bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hil", "bench", "sweep", *args, "--json"], capture_output=True,
                          text=True, cwd=ROOT, timeout=600)


@pytest.mark.parametrize("runs, grid", [(64, (8, 8)), (4, (2, 2)), (6, (3, 2)), (7, (7, 1)), (1, (1, 1))])
def test_the_built_in_sweep_is_gains_times_seeds(runs, grid):
    spec = default_spec(runs, 0.4)
    assert (len(spec.grid["driver.0.kp_ma_per_rad"]), len(spec.grid["sensor.seed"])) == grid
    assert len({v.id for v in variants(spec)}) == runs and spec.duration_s == 0.4
    assert Path(spec.base) == BASE


def _approx(value):
    return pytest.approx(value, rel=1e-9)


def test_a_tiny_sweep_reports_consistent_figures():
    out = _bench("--runs", "4", "--duration", "0.4", "--workers", "2", "--serial-runs", "2")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["sweep"]["runs"] == doc["results"] == doc["ok_runs"] == 4 and doc["error_runs"] == 0
    assert doc["sweep"]["file"] is None and doc["sweep"]["duration_s"] == 0.4
    assert doc["local_cluster"] and doc["workers"] == doc["threads"] == 2 and doc["scheduler"].startswith("tcp://")
    assert doc["startup_s"] > 0 and doc["wall_s"] > 0 and doc["single_run_total_s"] > 0
    assert 0 < doc["warm_up_s"] < doc["startup_s"]           # the workers' warm-up is part of the start-up
    threads, wall = doc["threads"], doc["wall_s"]
    # the efficiency is what the reported figures give
    assert doc["ideal_wall_s"] == _approx(doc["single_run_total_s"] / threads)
    assert doc["efficiency"] == _approx(doc["single_run_total_s"] / threads / wall)
    assert doc["ratio"] == _approx(1 / doc["efficiency"])
    assert doc["meets_goal"] == (doc["ratio"] <= doc["goal_ratio"]) and doc["goal_ratio"] == 1.3
    assert doc["efficiency_with_startup"] == _approx(doc["ideal_wall_s"] / (wall + doc["startup_s"]))
    serial = doc["serial"]
    assert serial["runs"] == len(serial["run_s"]) == 2 and serial["errors"] == []
    assert serial["first_run_s"] == serial["run_s"][0] and serial["per_run_s"] == serial["run_s"][1]
    assert serial["total_s"] == _approx(serial["per_run_s"] * 4)
    assert serial["efficiency"] == _approx(serial["total_s"] / threads / wall)
    tasks = doc["tasks"]
    assert sum(w["tasks"] for w in tasks["per_worker"]) == 4 and len(tasks["per_worker"]) <= 2
    assert all(w["first_s"] > 0 and w["warm_up_s"] > 0 for w in tasks["per_worker"])
    assert [w["warm_up_in_wall"] for w in tasks["per_worker"]] == [False] * len(tasks["per_worker"])
    assert tasks["efficiency"] == _approx(tasks["total_s"] / threads / wall)
    for ms in (doc["steal_ms"], *doc["steal_ms_per_cpu"].values(), serial["steal_ms"]):
        assert ms is None or (isinstance(ms, (int, float)) and not isinstance(ms, bool) and ms >= 0)
    assert len(doc["steal_ms_per_cpu"]) == doc["cpu_count"]
    cpu = doc["cpu_s"]
    assert cpu["workers"] > 0 and cpu["this_process"] >= 0
    assert cpu["busy"] is None or math.isclose(cpu["others"], max(cpu["busy"] - cpu["workers"] - cpu["this_process"],
                                                                  0.0), abs_tol=1e-6)


def test_error_rows_fail_the_benchmark(tmp_path):
    sweep = write_sweep(tmp_path, 0.4, '[grid]\n"loop.period_ms" = [0.5]\n')
    out = _bench(str(sweep), "--workers", "1", "--serial-runs", "0")
    assert out.returncode == 1
    doc = json.loads(out.stdout)                          # the figures are still printed
    assert doc["error_runs"] == 1 and doc["serial"] is None and doc["sweep"]["file"] == str(sweep)
    assert "error row" in out.stderr and "loop.period_ms" in out.stderr


@pytest.mark.parametrize("args, message", [
    (["--workers", "0"], "--workers must be a whole number from 1 to 256, not 0"),
    (["--workers", "100000"], "--workers must be a whole number from 1 to 256, not 100000"),
    (["--workers", "2", "--scheduler", "tcp://127.0.0.1:1"], "--workers is for a local cluster"),
    (["--runs", "0"], "--runs must be a whole number from 1 to 100000, not 0"),
    (["--runs", "100000000"], "--runs must be a whole number from 1 to 100000"),
    ([str(BASE), "--runs", "4"], "--runs sizes the built-in sweep"),
    (["--duration", "0"], "--duration must be a number in (0, 3600]"),
    (["--duration", "nan"], "--duration must be a number in (0, 3600]"),
    (["--serial-runs", "-1"], "--serial-runs must be a whole number from 0 to 1000, not -1"),
    (["--serial-runs", "100000000"], "--serial-runs must be a whole number from 0 to 1000"),
    ([str(ROOT / "nowhere.toml")], "cannot read the sweep file"),
])
def test_bad_options_are_refused_before_any_run(args, message):
    result = CliRunner().invoke(app, ["bench", "sweep", *args])
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split()) and "Traceback" not in result.output
