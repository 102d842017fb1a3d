"""The LQR example (examples/lqr): its saved gains are what the design script computes from the linearised DAS3 and
MTG arms, and the plug-in holds the elbow at the target in offline runs of configs/elbow-lqr.toml and
configs/elbow-lqr-mtg.toml."""
from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest

from hil.config import load_service_config
from hil.reports.run_metrics import tracking
from hil.rt.offline import run_offline

ROOT = Path(__file__).resolve().parents[2]


class Elbow:
    def __init__(self) -> None:
        self.angle = []

    def on_tick(self, record, engine, actuation_ns):
        self.angle.append(float(record[0]["frame"]["elbow_flexion"]))


PLANTS = {"das3": ("configs/elbow-lqr.toml", "examples/lqr/elbow_lqr_gain.json"),
          "mtg": ("configs/elbow-lqr-mtg.toml", "examples/lqr/elbow_lqr_gain_mtg.json")}


@pytest.mark.parametrize("plant", PLANTS)
def test_saved_gain_is_the_designed_one(plant):
    spec = importlib.util.spec_from_file_location("lqr_design", ROOT / "examples/lqr/design.py")
    design = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(design)
    config, gain = PLANTS[plant]
    doc = design.design(ROOT / config)
    saved = json.loads((ROOT / gain).read_text())
    assert doc["plant"] == saved["plant"] == plant
    np.testing.assert_allclose(saved["K"], doc["K"], rtol=1e-6)
    np.testing.assert_allclose(saved["level0"], doc["level0"], rtol=1e-6)
    assert max(doc["closed_loop_poles_abs"]) < 1.0                  # the discrete closed loop is stable


@pytest.mark.parametrize("plant", PLANTS)
def test_lqr_plugin_holds_the_elbow_at_90_deg(plant, caplog):
    cfg = load_service_config(ROOT / PLANTS[plant][0])
    assert cfg.plant.type == plant
    keep = Elbow()
    run_offline(cfg, round(5.0 / cfg.loop.period_s), [keep])
    angle = np.array(keep.angle)
    t = tracking(angle, math.radians(90.0), cfg.loop.period_s)
    assert math.degrees(angle[0]) < 45.0                               # from the passive posture
    assert t["settling_time_s"] is not None and t["settling_time_s"] < 1.0 and math.degrees(t["overshoot_rad"]) < 2.0
    assert np.max(np.abs(np.degrees(angle[-round(2.0 / cfg.loop.period_s):]) - 90.0)) < 0.5   # stays for the last 2 s
    assert "controller_" not in caplog.text                           # no call raised or returned garbage
