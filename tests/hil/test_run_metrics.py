"""A run's controller metrics (hil.reports.run_metrics), by hand on synthetic tick records, and in `hil report`."""
from __future__ import annotations

import math

import numpy as np
import pytest

from drivers.core.contract import STATUS_GH_UNSTABLE, frame_dtype
from hil.reports.run_metrics import delivered_charge_uc, run_metrics, tracking
from hil.rt.tick import tick_dtype

T = 0.01


def test_tracking_by_hand():
    """0 -> 1 rad in steps, overshooting to 1.1, back within 0.05 from frame 5 on: settling at (5 + 1) T."""
    angle = np.array([0.0, 0.5, 0.9, 1.1, 1.06, 1.04, 1.0, 0.98, 1.01, 1.0])
    m = tracking(angle, 1.0, T, band=0.05)
    assert m["overshoot_rad"] == pytest.approx(0.1)
    assert m["settling_time_s"] == pytest.approx(6 * T)
    assert m["rms_error_rad"] == pytest.approx(math.sqrt(np.mean((angle - 1.0) ** 2)))
    assert m["final_error_rad"] == 0.0
    assert tracking(angle[:5], 1.0, T, band=0.05)["settling_time_s"] is None       # still outside at the end
    assert tracking(np.full(4, 1.01), 1.0, T, band=0.05)["settling_time_s"] == 0.0
    down = tracking(2.0 - angle, 1.0, T, band=0.05)                                  # approached from above
    assert down["overshoot_rad"] == pytest.approx(0.1)


def test_charge_and_gh_margin_by_hand():
    ticks = np.zeros(100, tick_dtype(2, 3, frame_dtype()))
    ticks["applied"][:, 0] = (300.0, 20.0, 40.0, 0.0)         # 20 mA x 300 us x 40 Hz = 240 uC/s
    ticks["applied"][50:, 1] = (200.0, 10.0, 25.0, 1.0)       # doublets: 10 x 200 x 25 x 2 = 100 uC/s
    ticks["frame"]["gh_stability"] = np.linspace(-0.8, -0.3, 100)
    ticks["frame"]["status"][10:13] = STATUS_GH_UNSTABLE
    np.testing.assert_allclose(delivered_charge_uc(ticks["applied"], T), [240.0, 50.0])
    m = run_metrics(ticks, T, ("biceps", "triceps"))
    assert m["charge_uc"] == pytest.approx({"biceps": 240.0, "triceps": 50.0})
    assert m["gh_min_margin"] == pytest.approx(0.3) and m["gh_unstable_ticks"] == 3 and "tracking" not in m
    ticks["frame"]["gh_stability"] = np.nan                  # a plant without a GH model
    assert run_metrics(ticks, T, ("biceps", "triceps"))["gh_min_margin"] is None


def test_hil_report_gives_the_elbow_hold_metrics(tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    rec = tmp_path / "run.hilrec"
    run = subprocess.run([sys.executable, "-m", "hil", "run", "--config", str(root / "configs/elbow-hold.toml"),
                          "--duration", "3", "--offline", "--record", str(rec)], capture_output=True, text=True,
                         cwd=root, timeout=300)
    assert run.returncode == 0, run.stderr
    rep = subprocess.run([sys.executable, "-m", "hil", "report", str(rec), "--json"], capture_output=True, text=True,
                         cwd=root, timeout=300)
    m = json.loads(rep.stdout)["run_metrics"]
    tr = m["tracking"]                                      # target 90 deg from 37.6 deg (README: 4.8 deg overshoot)
    assert math.degrees(tr["overshoot_rad"]) == pytest.approx(4.8, abs=0.1)
    assert 0.5 < tr["settling_time_s"] < 1.5 and abs(math.degrees(tr["final_error_rad"])) < 0.5
    assert m["charge_uc"]["biceps"] > 0.0 and m["gh_min_margin"] > 0.0
