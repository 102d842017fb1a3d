"""`hil sweep --report` (hil.sweep.report): the plots and summary of a real sweep's results; heat-map cells are
the means of the results rows, error rows are counted and left out, a never-settled run is not a settling
time of 0, and a directory without results is a one-line error."""
from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import write_sweep

from hil.sweep.report import SweepReportError, sweep_report
from hil.sweep.runner import run_sweep
from hil.sweep.spec import load_sweep

ROOT = Path(__file__).resolve().parents[2]
KP, KI = "driver.0.kp_ma_per_rad", "driver.0.ki_ma_per_rad_s"
HEADLINE = ("rms_error_deg", "settling_time_s", "overshoot_deg", "gh_min_margin")


def _sweep_file(tmp_path: Path, body: str) -> Path:
    return write_sweep(tmp_path, 0.6, body)


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def _assert_png(path: str) -> None:
    """A PNG file (signature, IHDR) of a plausible size for a figure of plots."""
    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", path
    width, height = struct.unpack(">II", data[16:24])
    assert 400 <= width <= 4000 and 300 <= height <= 4000 and len(data) > 20_000, (path, width, height, len(data))


def _cell_rows(rows: list[dict], hm: dict, i: int, j: int, status: str = "ok") -> list[dict]:
    return [r for r in rows if r["status"] == status and r[hm["y_key"]] == hm["y_values"][i]
            and r[hm["x_key"]] == hm["x_values"][j]]


def _assert_heat_map_is_the_rows(rows: list[dict], hm: dict) -> None:
    """Every cell: the counts and, per headline metric, the mean over its ok rows (settled runs only)."""
    for i in range(len(hm["y_values"])):
        for j in range(len(hm["x_values"])):
            ok = _cell_rows(rows, hm, i, j)
            assert hm["n_ok"][i][j] == len(ok) and hm["n_error"][i][j] == len(_cell_rows(rows, hm, i, j, "error"))
            assert hm["never_settled"][i][j] == sum(r["settling_time_s"] is None for r in ok)
            for metric in HEADLINE:
                values = [r[metric] for r in ok if r[metric] is not None]
                cell = hm["mean"][metric][i][j]
                assert cell is None if not values else cell == pytest.approx(np.mean(values), rel=1e-12), (metric, i, j)


def test_report_of_a_2x2_grid_from_the_command_line(tmp_path):
    sweep = _sweep_file(tmp_path, f'[grid]\n"{KP}" = [40, 120]\n"{KI}" = [0, 200]\n')
    out = tmp_path / "out"
    run = subprocess.run([sys.executable, "-m", "hil", "sweep", str(sweep), "--out", str(out), "--workers", "0",
                          "--report", "--json"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout)["report"]
    assert doc == json.loads((out / "report" / "summary.json").read_text())
    assert doc["rows"] == {"ok": 4, "error": 0, "not_run": 0}
    kinds = sorted((f["kind"], tuple(f["keys"])) for f in doc["figures"])
    assert kinds == [("failures", ()), ("heat_map", (KP, KI)), ("metrics_vs_key", (KI,)), ("metrics_vs_key", (KP,))]
    for f in doc["figures"]:
        assert Path(f["file"]).parent == out / "report"
        _assert_png(f["file"])
    (hm,) = doc["heat_maps"]
    assert (hm["y_key"], hm["x_key"], hm["y_values"], hm["x_values"]) == (KP, KI, [40, 120], [0, 200])
    rows = _rows(out)
    _assert_heat_map_is_the_rows(rows, hm)
    rms = [r["rms_error_deg"] for r in rows]
    assert doc["metrics"]["rms_error_deg"] == {"n": 4, "null": 0, "min": min(rms), "median": float(np.median(rms)),
                                               "max": max(rms)}
    charge = doc["metrics"]["total_charge_uc"]
    totals = [sum(v for k, v in r.items() if k.startswith("charge_")) for r in rows]
    assert charge["max"] == pytest.approx(max(totals)) and charge["min"] > 0


def test_report_with_random_samples_a_text_key_and_error_rows(tmp_path):
    """kp x gh_action ("nope" is no action: error rows) with two random targets at each point: the means are
    over the samples, the "nope" column is counted as error and holds no value, text values are categories."""
    sweep = _sweep_file(tmp_path, f'[grid]\n"{KP}" = [40, 120]\n"safety.gh_action" = ["monitor", "nope"]\n'
                                  '[random]\nn = 2\nseed = 3\n"driver.0.target_deg" = {uniform = [70, 110]}\n')
    spec, out = load_sweep(str(sweep)), tmp_path / "out"
    run_sweep(spec, str(out), workers=0)
    doc = sweep_report(spec, str(out))
    rows = _rows(out)
    ok = [r for r in rows if r["status"] == "ok"]
    assert doc["rows"] == {"ok": 4, "error": 4, "not_run": 0} and len(ok) == 4
    assert sum(doc["error_reasons"].values()) == 4 and all("gh_action" in e for e in doc["error_reasons"])
    (hm,) = doc["heat_maps"]
    assert hm["x_values"] == ["monitor", "nope"] and hm["n_ok"] == [[2, 0], [2, 0]]
    assert hm["n_error"] == [[0, 2], [0, 2]]
    assert all(hm["mean"][m][i][1] is None for m in HEADLINE for i in range(2))
    _assert_heat_map_is_the_rows(rows, hm)
    targets = {r["driver.0.target_deg"] for r in ok}
    assert len(targets) == 2                                       # the cell means are over two different runs
    files = {Path(f["file"]).name for f in doc["figures"]}
    assert {"metrics_vs_driver.0.target_deg.png", "metrics_vs_safety.gh_action.png"} <= files
    for f in doc["figures"]:
        _assert_png(f["file"])
    settling = [r["settling_time_s"] for r in ok]
    stats = doc["metrics"]["settling_time_s"]
    assert 0 < settling.count(None) < 4                            # both kinds, so a null is not taken for 0
    assert stats["never_settled"] == stats["null"] == settling.count(None)
    assert stats["n"] == 4 - settling.count(None) and stats["min"] == min(s for s in settling if s is not None) > 0


def test_a_sweep_without_ok_rows_or_without_results_is_a_clear_error(tmp_path):
    sweep = _sweep_file(tmp_path, '[grid]\n"safety.gh_action" = ["nope"]\n')
    with pytest.raises(SweepReportError, match="results.jsonl not found"):
        sweep_report(load_sweep(str(sweep)), str(tmp_path / "empty"))
    run = subprocess.run([sys.executable, "-m", "hil", "sweep", str(sweep), "--out", str(tmp_path / "out"),
                          "--workers", "0", "--report"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert run.returncode == 2, run.stderr
    errors = [line for line in run.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "every run failed" in errors[0] and "'safety.gh_action'" in errors[0], run.stderr
    assert "Traceback" not in run.stderr and not (tmp_path / "out" / "report").exists()
    with pytest.raises(SweepReportError, match=r"no run of the sweep finished ok \(1 error row\(s\)"):
        sweep_report(load_sweep(str(sweep)), str(tmp_path / "out"))
