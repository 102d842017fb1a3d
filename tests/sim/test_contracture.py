"""Contracture (issue 37): a group's passive slack length shortened, the rest posture re-solved, the range the
joint reaches under a moment reduced; bad values refused."""
from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import angles_under_elbow_moment

from sim.das3.config import ConfigError, ModelConfig
from sim.das3.model import MUS_PEESLACK, load_model
from sim.das3.muscle_groups import element_indices
from sim.das3.plant import Plant

FLEXORS = ("bicl", "bicb", "brachialis", "brachiorad")
ELBOW = 9


def _contracted(shift: float):
    return load_model(ModelConfig(contracture=tuple((g, shift) for g in FLEXORS)))


def _elbow_after(model, moment_nm: float, seconds: float = 3.0) -> float:
    """Elbow flexion (deg) after ``seconds`` of a constant elbow moment, muscles unstimulated."""
    plant = Plant(model)
    return math.degrees(angles_under_elbow_moment(plant, moment_nm, int(round(seconds / plant.step_s)))[-1, ELBOW])


def test_the_passive_slack_of_the_contracted_groups_is_shorter(model):
    contracted = _contracted(0.2)
    idx = [i for g in FLEXORS for i in element_indices(g, model.muscle_names)]
    shift = model.arrays.mus[:, MUS_PEESLACK] - contracted.arrays.mus[:, MUS_PEESLACK]
    np.testing.assert_allclose(shift[idx], 0.2, rtol=1e-12)
    assert np.all(np.delete(shift, idx) == 0.0)


def test_the_contracted_arm_rests_flexed_and_stays_there(model):
    contracted = _contracted(0.2)
    rest = math.degrees(contracted.equilibrium_state[ELBOW])
    assert rest > math.degrees(model.equilibrium_state[ELBOW]) + 10.0
    assert _elbow_after(contracted, 0.0, 1.0) == pytest.approx(rest, abs=0.01)      # a re-solved rest posture


def test_a_contracture_takes_range_from_the_elbow(model):
    """Under a 1 N m extension moment the able-bodied elbow opens to about 15 deg; with the flexors' passive slack
    0.1 Lceopt shorter it stops more than 10 deg short of that (Diong et al. 2012 count a loss of >= 10 deg at a
    standard torque as a contracture)."""
    able, contracted = _elbow_after(model, -1.0), _elbow_after(_contracted(0.1), -1.0)
    assert contracted - able > 10.0, (able, contracted)


@pytest.mark.parametrize("config, message", [
    (dict(contracture=(("bicb", 1.0),)), r"must be a number in \[0, 1\) Lceopt"),
    (dict(contracture=(("bicps", 0.1),)), "unknown muscle element or group 'bicps'"),
    (dict(contracture=(("bicb", 0.1),), muscle_model="thelen2003"), "has none"),
])
def test_a_bad_contracture_is_one_config_error(config, message):
    with pytest.raises(ConfigError, match=message) as err:
        ModelConfig(**config)
    assert err.value.key == "contracture"
