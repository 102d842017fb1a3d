"""Denervation (ModelConfig.denervated: the plant gates the elements' excitation to 0) and atrophy
(ModelConfig.strength on Fmax) in the DAS3 plant and the analyses (issue 37, item 2)."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from helpers import arm_posture

from sim.analysis import static_opt as so
from sim.analysis.channel_opt import ChannelEquilibria
from sim.analysis.feedforward import excitation_between
from sim.das3.config import ConfigError, ModelConfig
from sim.das3.kernels.step import IA
from sim.das3.model import MUS_EXCITATION_GATE, MUS_K1PEE, MUS_K1SEE, N_DOF, N_LOADS, N_MUS, load_model
from sim.das3.muscle_groups import group_members
from sim.das3.plant import Plant

ELBOW_FLEXORS = ("bicl", "bicb", "brachialis")
"""The groups the default map's biceps channel drives (configs/stimulation-default.toml)."""
ELBOW = 9
H = 0.004


@pytest.fixture(scope="module")
def denervated():
    return load_model(ModelConfig(denervated=ELBOW_FLEXORS))


def _flexor_elements(model) -> np.ndarray:
    groups = group_members(model.muscle_names)
    return np.array(sorted(i for g in ELBOW_FLEXORS for i in groups[g]))


def test_denervated_names_are_checked_like_strength_and_the_config_stays_a_cache_key():
    with pytest.raises(ConfigError) as info:
        ModelConfig(denervated=("bicps",))
    assert info.value.key == "denervated" and "unknown muscle element or group 'bicps'" in str(info.value)
    assert "\n" not in str(info.value)
    with pytest.raises(ConfigError, match="must be a tuple"):
        ModelConfig(denervated=["bicl"])
    assert hash(ModelConfig(denervated=("bicl", "deltscap1"))) == hash(ModelConfig(denervated=("bicl", "deltscap1")))
    assert ModelConfig().denervated == ()


def test_the_gate_column_is_one_except_on_denervated_elements_and_nothing_else_changes(model, denervated):
    gate = np.ones(N_MUS)
    gate[_flexor_elements(model)] = 0.0
    np.testing.assert_array_equal(model.arrays.mus[:, MUS_EXCITATION_GATE], 1.0)
    np.testing.assert_array_equal(denervated.arrays.mus[:, MUS_EXCITATION_GATE], gate)
    for name, published in model.arrays._asdict().items():
        changed = np.asarray(getattr(denervated.arrays, name))
        if name == "mus":
            changed = np.delete(changed, MUS_EXCITATION_GATE, axis=1)
            published = np.delete(published, MUS_EXCITATION_GATE, axis=1)
        np.testing.assert_array_equal(changed, published, err_msg=name)
    np.testing.assert_array_equal(denervated.equilibrium_state, model.equilibrium_state)


def _run(model, u, seconds=0.5):
    """(activation, muscle force, q) after ``seconds`` of excitation u from the published rest."""
    plant = Plant(model, step_s=H)
    for _ in range(int(round(seconds / H))):
        plant.step(u)
    o = plant.outputs
    return o.activation.copy(), o.muscle_force.copy(), o.q.copy()


def test_full_stimulation_does_not_activate_a_denervated_group(model, denervated):
    flexors = _flexor_elements(model)
    others = np.setdiff1d(np.arange(N_MUS), flexors)
    a0 = denervated.equilibrium_state[IA:][flexors]
    a, _, _ = _run(denervated, np.ones(N_MUS), 0.3)     # longer: full co-contraction collapses the supinator
    assert np.all(np.abs(a[flexors]) <= np.abs(a0)) and np.abs(a0).max() < 1e-15   # rest activation, decaying
    assert a[others].min() > 0.9                                        # every other element is activated
    a_able, _, _ = _run(model, np.ones(N_MUS), 0.3)
    assert a_able[flexors].min() > 0.9


def test_stimulating_a_denervated_group_is_the_same_as_no_stimulation(model, denervated):
    """u = 1 on the denervated elbow flexors only: the same arm, muscle forces and activations, bit for bit, as
    u = 0; the able-bodied arm flexes its elbow under the same excitation."""
    u = np.zeros(N_MUS)
    u[_flexor_elements(model)] = 1.0
    stimulated = _run(denervated, u)
    resting = _run(denervated, np.zeros(N_MUS))
    for got, want in zip(stimulated, resting):
        np.testing.assert_array_equal(got, want)
    _, force_able, q_able = _run(model, u)
    assert q_able[ELBOW] - resting[2][ELBOW] > math.radians(30.0)
    flexors = _flexor_elements(model)
    assert force_able[flexors].sum() > 10.0 * resting[1][flexors].sum()


def test_static_optimisation_gives_a_denervated_group_no_activation(model):
    """At an arm posture with the middle and posterior deltoid denervated: their activations are 0 (the bound
    alpha <= gate = 0 and no active range in the rest model), the solve passes its checks and other muscles
    take the load."""
    weak = load_model(ModelConfig(denervated=("deltscap",)))
    posture = arm_posture(weak, 60.0)
    deltoid = np.array(group_members(weak.muscle_names)["deltscap"])
    able = so.solve_static(model, posture, criterion="b")
    sol = so.solve_static(weak, posture, criterion="b")
    assert sol.checks.passed, sol.checks.failures
    assert np.max(np.abs(sol.activation[deltoid])) < 1e-9
    assert able.activation[deltoid].max() > 0.01                       # the able-bodied arm uses them
    layout = so.layout_for(posture, 0)
    alpha_bounds = so.bounds(weak, layout, so.MINIMAL_EFFORT)[layout.alpha]
    assert {alpha_bounds[i] for i in deltoid} == {(0.0, 0.0)} and alpha_bounds[0] == (0.0, 1.0)


def test_the_channel_and_feed_forward_excitations_of_a_denervated_group_are_zero(model, denervated):
    """sim.analysis.channel_opt forms u = gate * map(levels) (and its derivative), sim.analysis.feedforward's
    excitation between two activations is gated too: what the plant would apply, at rest a = u."""
    flexors = _flexor_elements(model)
    gains = np.zeros((2, N_MUS))
    gains[0, flexors], gains[1, :] = 1.0, 0.5
    levels = np.array([0.8, 0.4])
    for m, zeroed in ((model, False), (denervated, True)):
        eqs = ChannelEquilibria(m, gains, arm_posture(m, 30.0), np.zeros(N_LOADS))
        u, du = eqs.excitation(levels)
        ff = excitation_between(m, np.zeros(N_MUS), np.full(N_MUS, 0.3), 0.02)
        if zeroed:
            assert np.all(u[flexors] == 0.0) and np.all(du[flexors] == 0.0) and np.all(ff[flexors] == 0.0)
        else:
            np.testing.assert_allclose(u[flexors], 0.8)
            assert ff[flexors].min() > 0.3
        others = np.setdiff1d(np.arange(N_MUS), flexors)
        np.testing.assert_allclose(u[others], 0.2)
        assert ff[others].min() > 0.3


def _elbow_moments(model, q: np.ndarray, alpha: float) -> np.ndarray:
    """(138,) each element's moment about the elbow flexion axis (N m, + flexion) at rest at posture q with
    activation fraction ``alpha`` (sim.analysis.rest_model: F = Fp + alpha (Ff - Fp), a fibre held at its shortest
    valid length): -dL_i/dq_elbow F_i, the muscles' own moments (no gravity)."""
    posture = arm_posture(model, 60.0)
    layout = so.layout_for(posture, 0)
    rest = so.RestModel(model, np.zeros(N_LOADS), q, layout)
    with np.errstate(invalid="ignore", divide="ignore"):      # dF/dL of a slack muscle without a linear SEE term
        r = rest.at(np.concatenate([q[list(layout.free_dofs)], np.full(N_MUS, alpha)]))
    return -rest.moment_arms()[:, ELBOW] * r.force


def _without_linear_terms(model):
    """The model with the 10 N/m linear SEE and PEE terms (the only muscle forces not proportional to Fmax) zeroed."""
    mus = np.array(model.arrays.mus)
    mus[:, [MUS_K1PEE, MUS_K1SEE]] = 0.0
    mus.flags.writeable = False
    return dataclasses.replace(model, arrays=model.arrays._replace(mus=mus))


def test_atrophy_halves_the_flexors_elbow_moment_at_full_activation(model):
    """Elbow flexor groups (those with a flexion moment at 90 deg) at strength 0.5. Compared: the sum over their
    elements of -dL_i/dq_elbow F_i at full activation at rest, at the published rest posture with the elbow at
    90 deg (the muscles' moment; gravity is not in it). It is half the able-bodied one to 1 % (the 10 N/m
    linear terms do not scale with Fmax), and to rounding, element by element, with those terms zeroed in both."""
    q = np.array(model.equilibrium_state[:N_DOF])
    q[ELBOW] = math.radians(90.0)
    able = _elbow_moments(model, q, 1.0)
    groups = group_members(model.muscle_names)
    flexors = sorted(g for g, idx in groups.items() if able[idx].sum() > 0.5)
    assert {"bicl", "bicb", "brachialis", "brachiorad"} <= set(flexors), flexors
    weak_model = load_model(ModelConfig(strength=tuple((g, 0.5) for g in flexors)))
    weak = _elbow_moments(weak_model, q, 1.0)
    members = np.concatenate([groups[g] for g in flexors])
    assert able[members].sum() > 50.0
    assert weak[members].sum() == pytest.approx(0.5 * able[members].sum(), rel=1e-2)
    others = np.setdiff1d(np.arange(N_MUS), members)
    np.testing.assert_allclose(weak[others], able[others], rtol=1e-9, atol=1e-9)
    able_exact = _elbow_moments(_without_linear_terms(model), q, 1.0)
    weak_exact = _elbow_moments(_without_linear_terms(weak_model), q, 1.0)
    np.testing.assert_allclose(weak_exact[members], 0.5 * able_exact[members], rtol=1e-9, atol=1e-12)
