"""[model.strength]: a factor on the Fmax of named muscle elements or groups (patient variants), the rest
posture re-solved for it, and its use as a sweep key."""
from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
from helpers import write_sweep

from hil.sweep.runner import run_sweep
from hil.sweep.spec import load_sweep
from sim.das3.config import ModelConfig
from sim.das3.dynamics import residual
from sim.das3.model import MUS_FMAX, N_MUS, load_model
from sim.das3.muscle_groups import group_members


@pytest.fixture(scope="module")
def published():
    return load_model()


@pytest.fixture(scope="module")
def weakened():
    return load_model(ModelConfig(strength=(("bicb", 0.5), ("triclong1", 2.0), ("deltscap", 0.25))))


def test_strength_scales_fmax_of_the_named_elements_and_groups_only(published, weakened):
    scale = np.ones(N_MUS)
    groups = group_members(published.muscle_names)
    scale[groups["bicb"]] = 0.5
    scale[groups["deltscap"]] = 0.25
    scale[published.muscle_index("triclong1")] = 2.0
    np.testing.assert_array_equal(weakened.arrays.mus[:, MUS_FMAX], published.arrays.mus[:, MUS_FMAX] * scale)
    unchanged = scale == 1.0
    np.testing.assert_array_equal(weakened.arrays.mus[unchanged], published.arrays.mus[unchanged])


def _rms_residual(model, x) -> float:
    zero = np.zeros(N_MUS)
    return float(np.sqrt(np.mean(residual(model, x, np.zeros_like(x), zero) ** 2)))


def test_rest_posture_is_the_equilibrium_of_the_changed_arm(published, weakened):
    assert _rms_residual(weakened, weakened.equilibrium_state) < 1e-8
    assert _rms_residual(weakened, published.equilibrium_state) > 1e-4     # the published rest would settle
    assert not np.array_equal(weakened.equilibrium_state[:11], published.equilibrium_state[:11])


def _sweep_rows(tmp_path: Path) -> dict[float, dict]:
    sweep = write_sweep(tmp_path, 1.5, '[grid]\n"model.strength.bicb" = [0.3, 1.0]\n"model.strength.brachialis" = [0.3]\n')
    run_sweep(load_sweep(str(sweep)), str(tmp_path / "out"), workers=0)
    with open(tmp_path / "out" / "results.csv", newline="") as f:
        return {float(r["model.strength.bicb"]): r for r in csv.DictReader(f)}


def test_a_sweep_over_flexor_strength_needs_more_charge_from_the_weaker_arm(tmp_path):
    rows = _sweep_rows(tmp_path)
    assert all(r["status"] == "ok" for r in rows.values()), rows
    weak, stronger = rows[0.3], rows[1.0]
    assert float(weak["charge_biceps_uc"]) > 1.05 * float(stronger["charge_biceps_uc"])
