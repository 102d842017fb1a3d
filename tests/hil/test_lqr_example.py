"""The LQR example (examples/lqr): its saved gain is what the design script computes from the linearised model, and
the plug-in holds the elbow at the target in an offline run of configs/elbow-lqr.toml."""
from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np

from hil.config import load_service_config
from hil.reports.run_metrics import tracking
from hil.rt.offline import run_offline

ROOT = Path(__file__).resolve().parents[2]


class Elbow:
    def __init__(self) -> None:
        self.angle = []

    def on_tick(self, record, engine, actuation_ns):
        self.angle.append(float(record[0]["frame"]["elbow_flexion"]))


def test_saved_gain_is_the_designed_one():
    spec = importlib.util.spec_from_file_location("lqr_design", ROOT / "examples/lqr/design.py")
    design = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(design)
    doc = design.design()
    saved = json.loads((ROOT / "examples/lqr/elbow_lqr_gain.json").read_text())
    np.testing.assert_allclose(saved["K"], doc["K"], rtol=1e-6)
    np.testing.assert_allclose(saved["level0"], doc["level0"], rtol=1e-6)
    assert max(doc["closed_loop_poles_abs"]) < 1.0                  # the discrete closed loop is stable


def test_lqr_plugin_holds_the_elbow_at_90_deg(caplog):
    cfg = load_service_config(ROOT / "configs/elbow-lqr.toml")
    keep = Elbow()
    run_offline(cfg, round(5.0 / cfg.loop.period_s), [keep])
    angle = np.array(keep.angle)
    t = tracking(angle, math.radians(90.0), cfg.loop.period_s)
    assert math.degrees(angle[0]) < 45.0                               # from the passive posture
    assert t["settling_time_s"] is not None and t["settling_time_s"] < 1.0 and math.degrees(t["overshoot_rad"]) < 2.0
    assert np.max(np.abs(np.degrees(angle[-round(2.0 / cfg.loop.period_s):]) - 90.0)) < 0.5   # stays for the last 2 s
    assert "controller_" not in caplog.text                           # no call raised or returned garbage
