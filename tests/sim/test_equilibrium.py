"""Static equilibria of the DAS3 model (sim.das3.equilibrium.solve_equilibrium)."""
import math

import numpy as np
import pytest
from helpers import rms

from sim.das3.dynamics import residual
from sim.das3.equilibrium import EquilibriumResult, solve_equilibrium
from sim.das3.model import N_DOF, N_MUS, N_STATES

IQ, IQD, IS, IA = 0, N_DOF, 2 * N_DOF, 2 * N_DOF + N_MUS


def check_is_equilibrium(model, r: EquilibriumResult, u=None, loads=None, tol=1e-10):
    u = np.zeros(N_MUS) if u is None else u
    assert r.x.shape == (N_STATES,) and np.all(np.isfinite(r.x))
    assert r.residual_rms < tol
    # the reported residual is the real one
    f = residual(model, r.x, np.zeros(N_STATES), u, loads)
    assert rms(f) == pytest.approx(r.residual_rms, rel=1e-6, abs=1e-14)
    assert np.all(r.x[IQD:IS] == 0.0)
    np.testing.assert_array_equal(r.x[IA:], u)  # activation = excitation at steady state


def test_published_state_is_found_at_once(model):
    r = solve_equilibrium(model)
    check_is_equilibrium(model, r)
    assert r.iterations <= 2
    np.testing.assert_allclose(r.x[IQ:IQD], model.equilibrium_state[IQ:IQD], atol=1e-9)
    np.testing.assert_allclose(r.x[IS:IA], model.equilibrium_state[IS:IA], rtol=1e-9)
    # outputs are filled in
    assert r.gh_force.shape == (3,) and r.st_contact_force.shape == (2, 3) and r.th_angles.shape == (3,)
    assert math.isfinite(r.gh_stability)


@pytest.mark.parametrize("start", ["rounded_to_5_deg", "mid_range"])
def test_converges_to_the_published_equilibrium_from_a_rough_posture(model, start):
    q_eq = model.equilibrium_state[IQ:IQD]
    if start == "rounded_to_5_deg":
        q0 = np.radians(np.round(np.degrees(q_eq) / 5.0) * 5.0)
        assert np.max(np.abs(q0 - q_eq)) > math.radians(1.0)
    else:
        q0 = model.dof_ranges.mean(axis=1)
    r = solve_equilibrium(model, x_guess=q0)
    check_is_equilibrium(model, r)
    assert np.max(np.abs(r.x[IQ:IQD] - q_eq)) < 1e-6
    np.testing.assert_allclose(r.x[IS:IA], model.equilibrium_state[IS:IA], rtol=1e-5)


def test_full_state_guess_uses_only_its_posture(model):
    x = np.array(model.equilibrium_state)
    x[IQ:IQD] = np.radians(np.round(np.degrees(x[IQ:IQD]) / 5.0) * 5.0)
    x[IQD:IS] = 0.3        # velocities are ignored ...
    x[IS:IA] *= 1.2       # ... and s is re-solved at the guessed posture
    x[IA:] = 0.7          # ... and a is set to u
    r = solve_equilibrium(model, x_guess=x)
    check_is_equilibrium(model, r)
    assert np.max(np.abs(r.x[IQ:IQD] - model.equilibrium_state[IQ:IQD])) < 1e-6


def test_guess_is_not_modified(model):
    q0 = model.dof_ranges.mean(axis=1).copy()
    given = q0.copy()
    solve_equilibrium(model, x_guess=q0)
    np.testing.assert_array_equal(q0, given)


def test_constant_excitation(model):
    u = np.full(N_MUS, 0.02)
    r = solve_equilibrium(model, u=u)
    check_is_equilibrium(model, r, u=u)
    # muscle tone moves the posture away from the passive equilibrium
    assert np.max(np.abs(r.x[IQ:IQD] - model.equilibrium_state[IQ:IQD])) > math.radians(1.0)


def test_excitation_outside_the_unit_interval_is_clipped(model):
    u = np.zeros(N_MUS)
    u[:10] = -0.3
    u[10:20] = 1.5
    r = solve_equilibrium(model, u=u)
    clipped = np.clip(u, 0.0, 1.0)
    check_is_equilibrium(model, r, u=clipped)


def test_with_an_external_load(model):
    loads = np.zeros(10)
    loads[3] = 1.0  # 1 N m elbow flexion moment
    r = solve_equilibrium(model, loads=loads)
    check_is_equilibrium(model, r, loads=loads)
    assert r.x[IQ + 9] > model.equilibrium_state[IQ + 9] + math.radians(1.0)


@pytest.mark.parametrize("u", [np.zeros(N_MUS - 1), np.zeros(N_MUS + 1), np.zeros((2, N_MUS)),
                               np.where(np.arange(N_MUS) == 4, np.nan, 0.0)],
                         ids=["137", "139", "2x138", "nan"])
def test_bad_excitation_raises_value_error(model, u):
    with pytest.raises(ValueError):
        solve_equilibrium(model, u=u)


@pytest.mark.parametrize("bad", [np.inf, -np.inf])
def test_infinite_excitation_raises_value_error(model, bad):
    """Like Plant.step, which rejects NaN and inf. Fails with the current sim/: solve_equilibrium clips u
    to [0, 1] *before* its finiteness check, so +inf silently becomes 1 and -inf 0 (only NaN survives
    np.clip and is caught)."""
    u = np.zeros(N_MUS)
    u[4] = bad
    with pytest.raises(ValueError):
        solve_equilibrium(model, u=u)


@pytest.mark.parametrize("x", [np.zeros(10), np.zeros(N_STATES - 1), np.full(N_DOF, np.nan),
                               np.where(np.arange(N_STATES) == 100, np.nan, 0.5)],
                         ids=["10", "297", "nan_q", "nan_x"])
def test_bad_guess_raises_value_error(model, x):
    with pytest.raises(ValueError):
        solve_equilibrium(model, x_guess=x)


@pytest.mark.parametrize("loads", [np.zeros(3), np.zeros(11), np.r_[np.zeros(9), np.nan]],
                         ids=["3", "11", "nan"])
def test_bad_loads_raise_value_error(model, loads):
    """Fails with the current sim/ for a wrong-sized load vector: solve_equilibrium does not check the
    loads' shape. With 3 values the kernels (compiled with boundscheck=False) read loads[3..9] past the end
    of the array (undefined behaviour) and a 'converged' result is returned; with 11 the extra value is
    silently ignored. NaN loads are only caught indirectly (InvalidInputError, a ValueError), by the
    Plant used for dynamic relaxation after Newton has failed."""
    with pytest.raises(ValueError):
        solve_equilibrium(model, loads=loads, relaxations=1)
