"""The LQR example (examples/lqr): its saved gains are what the design script computes from the linearised DAS3 and
MTG arms, and the plug-in holds the elbow at the target in offline runs of configs/elbow-lqr.toml and
configs/elbow-lqr-mtg.toml."""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest

from drivers.controllers.plugin import ControllerSettings
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
MPC = {"das3": "configs/elbow-mpc.toml", "mtg": "configs/elbow-mpc-mtg.toml"}
DOFS = ("SCy", "SCz", "SCx", "ACy", "ACz", "ACx", "GHy", "GHz", "GHyy", "ELx", "PSy")


def _controllers(horizon=10):
    """The example's LqrElbow and MpcElbow, reset on the DAS3 gain file."""
    spec = importlib.util.spec_from_file_location("lqr_elbow", ROOT / "examples/lqr/lqr_elbow.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    params = {"gain_file": "examples/lqr/elbow_lqr_gain.json", "flexor_channel": 4, "extensor_channel": 5}
    settings = ControllerSettings(period_s=0.004, rate_hz=50, call_period_s=0.02, channel_names=("c",) * 8,
                                  muscle_names=(), group_names=(), dof_names=DOFS, params=params, base_dir=str(ROOT))
    lqr, mpc = module.LqrElbow(), module.MpcElbow()
    lqr.reset(settings)
    mpc.reset(dataclasses.replace(settings, params={**params, "horizon": horizon}))
    return lqr, mpc


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


def test_mpc_without_bounds_is_the_lqr():
    """The terminal cost is the infinite horizon's, so the unbounded plan's first move is -K z (the operating
    extensor level sits on its bound 0, so the shipped bounds are lifted to see it)."""
    lqr, mpc = _controllers()
    mpc.bounds = (np.full(20, -np.inf), np.full(20, np.inf))
    for z in np.random.default_rng(1).normal(0.0, [0.01, 0.2, 0.5], (5, 3)):
        np.testing.assert_allclose(mpc.plan(z), lqr.plan(z), rtol=0, atol=1e-9)


def test_mpc_plans_within_the_level_bounds_where_the_lqr_clips():
    lqr, mpc = _controllers()
    z = np.array([0.0, -0.5, 0.0])                                  # 29 deg short of the target
    assert lqr.plan(z)[1] < 0.0                                     # the LQR wants a negative extensor level
    from scipy.optimize import lsq_linear
    plan = lsq_linear(mpc.L, -(mpc.M @ z), bounds=mpc.bounds, method="bvls", tol=1e-12).x + np.tile(mpc.level0, 10)
    assert np.all(plan >= -1e-12) and np.all(plan <= np.tile(mpc.top, 10) + 1e-12)
    assert mpc.plan(z)[1] == pytest.approx(0.0, abs=1e-12) and mpc.plan(z)[0] != pytest.approx(lqr.plan(z)[0])


def test_mpc_horizon_out_of_range_is_one_clear_error():
    with pytest.raises(ValueError, match="horizon is 1..200 calls"):
        _controllers(horizon=0)


@pytest.mark.parametrize("plant", MPC)
def test_mpc_plugin_holds_the_elbow_at_90_deg(plant, caplog):
    cfg = load_service_config(ROOT / MPC[plant])
    assert cfg.plant.type == plant
    keep = Elbow()
    run_offline(cfg, round(5.0 / cfg.loop.period_s), [keep])
    angle = np.array(keep.angle)
    t = tracking(angle, math.radians(90.0), cfg.loop.period_s)
    assert t["settling_time_s"] is not None and t["settling_time_s"] < 1.0 and math.degrees(t["overshoot_rad"]) < 2.0
    assert np.max(np.abs(np.degrees(angle[-round(2.0 / cfg.loop.period_s):]) - 90.0)) < 0.5
    assert "controller_" not in caplog.text
