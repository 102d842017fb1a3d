"""The fixed-step DAS3 plant (sim.das3.plant.Plant): stepping, input validation, divergence handling, loads,
determinism, warm-up, allocation-free steps and output views."""
import math
import tracemalloc

import numpy as np
import pytest
from numba import njit, types
from numba.core.runtime import _nrt_python, rtsys

from sim.das3.kernels.step import bundle_step
from sim.das3.model import N_DOF, N_MUS, N_STATES
from sim.das3.plant import InvalidInputError, Plant, PlantDivergedError

H = 0.004
ELX = 9  # elbow flexion
SHOULDER = slice(6, 9)  # GHy, GHz, GHyy
DEG = math.pi / 180.0


@pytest.fixture
def plant(model):
    return Plant(model, step_s=H)


def snapshot(p: Plant):
    """Everything a rejected call must leave untouched."""
    return (p.x.copy(), p.xdot.copy(), p.excitation.copy(), p.loads.copy(), p.time, p.steps,
            p.clipped_total, p.failed)


def assert_unchanged(p: Plant, before):
    x, xd, u, loads, t, steps, clipped, failed = before
    assert np.array_equal(p.x, x)
    assert np.array_equal(p.xdot, xd)
    assert np.array_equal(p.excitation, u)
    assert np.array_equal(p.loads, loads)
    assert (p.time, p.steps, p.clipped_total, p.failed) == (t, steps, clipped, failed)


def run(p: Plant, n: int, u=None):
    u = np.zeros(N_MUS) if u is None else u
    for _ in range(n):
        p.step(u)


# ---------------------------------------------------------------------------------------------------
# Stepping
# ---------------------------------------------------------------------------------------------------

def test_zero_excitation_stays_at_the_published_equilibrium(plant, model):
    q0 = model.equilibrium_state[:N_DOF].copy()
    np.testing.assert_array_equal(plant.x, model.equilibrium_state)
    assert plant.time == 0.0
    run(plant, 50)
    assert plant.steps == 50 and plant.time == pytest.approx(50 * H)
    assert np.max(np.abs(plant.x[:N_DOF] - q0)) < 1e-9
    assert np.max(np.abs(plant.outputs.qdot)) < 1e-6


def test_excitation_ramp_moves_the_arm(plant, model):
    q0 = model.equilibrium_state[:N_DOF].copy()
    for n in range(1, 51):  # all excitations 0 -> 1 over 0.2 s
        plant.step(np.full(N_MUS, min(n * H / 0.2, 1.0)))
    out = plant.outputs
    assert plant.clipped_total == 0
    for name in ("q", "qdot", "s", "activation", "muscle_force", "muscle_length", "th_angles",
                 "hand_position", "gh_force", "gh_angles", "st_contact_force", "conoid_force"):
        assert np.all(np.isfinite(getattr(out, name))), name
    assert math.isfinite(out.gh_stability)
    dq = np.abs(plant.x[:N_DOF] - q0)
    assert np.max(dq[SHOULDER]) > 1.0 * DEG
    assert np.max(dq[ELX:]) > 1.0 * DEG  # elbow / forearm
    assert np.all(out.activation > 0.3) and np.all(out.activation < 1.0)
    np.testing.assert_array_equal(plant.excitation, np.ones(N_MUS))


# ---------------------------------------------------------------------------------------------------
# Excitation input
# ---------------------------------------------------------------------------------------------------

def test_out_of_range_excitation_is_clipped_and_counted(plant):
    u = np.full(N_MUS, 0.3)
    u[[3, 50, 77]] = -0.5
    u[[0, 10, 100, 137]] = 1.7
    given = u.copy()
    plant.step(u)
    assert plant.clipped_total == 7
    np.testing.assert_array_equal(u, given)  # the caller's array is not modified
    applied = plant.excitation
    assert np.all((applied >= 0.0) & (applied <= 1.0))
    np.testing.assert_array_equal(applied, np.clip(given, 0.0, 1.0))
    plant.step(u)
    assert plant.clipped_total == 14
    plant.step(np.full(N_MUS, 0.3))
    assert plant.clipped_total == 14
    # exactly 0 and 1 are in range
    plant.step(np.r_[np.zeros(69), np.ones(69)])
    assert plant.clipped_total == 14


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_excitation_is_rejected_without_touching_the_state(plant, model, bad):
    run(plant, 3, np.full(N_MUS, 0.1))
    before = snapshot(plant)
    gh_before = plant.outputs.gh_force.copy()
    u = np.full(N_MUS, 0.2)
    u[42] = bad
    u[7] = 2.0  # an out-of-range value in a rejected input is not counted
    with pytest.raises(InvalidInputError) as err:
        plant.step(u)
    assert model.muscle_names[42] in str(err.value)
    assert_unchanged(plant, before)
    np.testing.assert_array_equal(plant.outputs.gh_force, gh_before)
    # the plant carries on normally
    plant.step(np.full(N_MUS, 0.2))
    assert plant.steps == 4 and not plant.failed


def test_non_finite_excitation_message_names_every_bad_muscle(plant, model):
    u = np.zeros(N_MUS)
    u[[5, 120]] = math.nan
    with pytest.raises(InvalidInputError) as err:
        plant.step(u)
    assert model.muscle_names[5] in str(err.value) and model.muscle_names[120] in str(err.value)


@pytest.mark.parametrize("bad", [np.zeros(N_MUS - 1), np.zeros(N_MUS + 1), np.zeros((1, N_MUS)),
                                 np.zeros((2, N_MUS)), np.float64(0.5), []],
                         ids=["137", "139", "1x138", "2x138", "scalar", "empty"])
def test_wrong_shape_excitation_is_rejected(plant, bad):
    before = snapshot(plant)
    with pytest.raises(InvalidInputError):
        plant.step(bad)
    assert_unchanged(plant, before)


def test_excitation_as_list_or_float32_is_accepted(model):
    a, b = Plant(model), Plant(model)
    u = np.random.default_rng(0).uniform(0, 1, N_MUS)
    a.step(u)
    b.step(list(u))
    np.testing.assert_array_equal(a.x, b.x)
    c = Plant(model)
    c.step(u.astype(np.float32))
    np.testing.assert_array_equal(c.excitation, u.astype(np.float32).astype(np.float64))


# ---------------------------------------------------------------------------------------------------
# Divergence
# ---------------------------------------------------------------------------------------------------

def test_residual_limit_rejects_a_step_and_keeps_the_state(model):
    p = Plant(model, step_s=H, residual_limit=1e-30)
    before = snapshot(p)
    with pytest.raises(PlantDivergedError):
        p.step(np.full(N_MUS, 0.5))
    assert p.failed
    np.testing.assert_array_equal(p.x, before[0])
    np.testing.assert_array_equal(p.xdot, before[1])
    assert p.time == 0.0 and p.steps == 0


def test_divergence_under_an_absurd_load(plant):
    plant.set_loads(hand_force=(0.0, -1e9, 0.0))
    last_good = None
    with pytest.raises(PlantDivergedError):
        for _ in range(200):
            last_good = (plant.x.copy(), plant.xdot.copy(), plant.steps)
            plant.step(np.zeros(N_MUS))
    assert plant.failed
    x_good, xd_good, steps_good = last_good
    assert np.all(np.isfinite(plant.x))
    np.testing.assert_array_equal(plant.x, x_good)  # the last good state is kept
    np.testing.assert_array_equal(plant.xdot, xd_good)
    assert plant.steps == steps_good
    # refuses to continue, even with sane inputs, until reset
    plant.set_loads(hand_force=(0.0, 0.0, 0.0))
    for _ in range(2):
        with pytest.raises(PlantDivergedError):
            plant.step(np.zeros(N_MUS))
    np.testing.assert_array_equal(plant.x, x_good)
    plant.reset()
    assert not plant.failed and plant.time == 0.0
    run(plant, 10)
    assert np.max(np.abs(plant.x - plant.model.equilibrium_state)) < 1e-9


def test_outputs_after_divergence_describe_the_kept_state(plant):
    """After a rejected step every output describes the state the plant kept, under the current loads
    (the workspace is re-evaluated at the restored state, not left at the rejected one)."""
    run(plant, 5, np.full(N_MUS, 0.05))
    force, length = plant.outputs.muscle_force.copy(), plant.outputs.muscle_length.copy()
    plant.set_loads(hand_force=(0.0, -1e9, 0.0))
    with pytest.raises(PlantDivergedError):
        run(plant, 1)
    np.testing.assert_array_equal(plant.outputs.muscle_length, length)
    np.testing.assert_array_equal(plant.outputs.muscle_force, force)
    kept = Plant(plant.model, step_s=H)
    kept.set_loads(hand_force=(0.0, -1e9, 0.0))
    kept.reset(plant.x, xdot=plant.xdot, excitation=plant.excitation)
    np.testing.assert_allclose(plant.outputs.gh_force, kept.outputs.gh_force, rtol=1e-12)
    np.testing.assert_allclose(plant.outputs.st_contact_force, kept.outputs.st_contact_force, rtol=1e-12)
    assert plant.outputs.gh_stability == pytest.approx(kept.outputs.gh_stability, rel=1e-12)


# ---------------------------------------------------------------------------------------------------
# Initial state, step size
# ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["short", "long", "nan", "inf", "2d"])
def test_bad_initial_state_is_rejected(model, kind):
    x = np.array(model.equilibrium_state)
    bad = {"short": x[:-1], "long": np.r_[x, 0.0], "nan": np.where(np.arange(N_STATES) == 30, np.nan, x),
           "inf": np.where(np.arange(N_STATES) == 200, np.inf, x), "2d": x[None, :]}[kind]
    with pytest.raises(InvalidInputError):
        Plant(model, initial_state=bad)
    p = Plant(model)
    run(p, 2, np.full(N_MUS, 0.1))
    before = snapshot(p)
    with pytest.raises(InvalidInputError):
        p.reset(bad)
    assert_unchanged(p, before)


def test_initial_state_is_used_and_copied(model):
    x = np.array(model.equilibrium_state)
    x[ELX] += 0.1
    p = Plant(model, initial_state=x)
    np.testing.assert_array_equal(p.x, x)
    x[:] = 0.0
    assert p.x[ELX] == pytest.approx(model.equilibrium_state[ELX] + 0.1)
    p.reset()
    np.testing.assert_array_equal(p.x, model.equilibrium_state)


@pytest.mark.parametrize("h", [0.0, -0.004, 1e-6, 0.05, math.nan, "0.004"])
def test_bad_step_size_is_rejected(model, h):
    with pytest.raises(InvalidInputError):
        Plant(model, step_s=h)


# ---------------------------------------------------------------------------------------------------
# External loads
# ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs", [
    {"moments": (0.0, 0.0, 0.0, 1.0)}, {"moments": np.zeros(6)}, {"arm_support": (0.1,)},
    {"arm_support": (0.1, 5.0, 0.0)}, {"hand_force": (0.0, 1.0)}, {"hand_force": np.zeros(4)},
    {"moments": (0.0, math.nan, 0.0, 0.0, 0.0)}, {"arm_support": (0.1, math.inf)},
    {"hand_force": (0.0, -math.inf, 0.0)}, {"arm_support": (-0.05, 10.0)},
], ids=lambda kw: next(iter(kw)))
def test_bad_loads_are_rejected(plant, kwargs):
    plant.set_loads(moments=(0.1, 0.2, 0.3, 0.4, 0.5))
    before = snapshot(plant)
    with pytest.raises(InvalidInputError):
        plant.set_loads(**kwargs)
    assert_unchanged(plant, before)


@pytest.mark.parametrize("bad", [np.zeros(9), np.zeros(11), np.r_[np.zeros(9), math.nan]])
def test_bad_load_vector_is_rejected(plant, bad):
    with pytest.raises(InvalidInputError):
        plant.set_load_vector(bad)
    np.testing.assert_array_equal(plant.loads, np.zeros(10))


def test_set_loads_keeps_the_other_groups(plant):
    plant.set_loads(moments=(1, 2, 3, 4, 5))
    plant.set_loads(arm_support=(0.1, 20.0))
    plant.set_loads(hand_force=(7, 8, 9))
    np.testing.assert_array_equal(plant.loads, [1, 2, 3, 4, 5, 0.1, 20, 7, 8, 9])
    plant.loads[0] = 99.0  # a copy
    assert plant.loads[0] == 1.0


def _posture_after(model, seconds=0.3, **loads):
    p = Plant(model, step_s=H)
    if loads:
        p.set_loads(**loads)
    run(p, int(round(seconds / H)))
    return p.x[:N_DOF].copy()


def test_hand_force_changes_the_posture(model):
    free = _posture_after(model)
    lifted = _posture_after(model, hand_force=(0.0, 20.0, 0.0))
    d = np.abs(lifted - free)
    assert max(d[ELX], np.max(d[SHOULDER])) > 0.5 * DEG


def test_elbow_moment_flexes_the_elbow(model):
    free = _posture_after(model)
    flexed = _posture_after(model, moments=(0.0, 0.0, 0.0, 2.0, 0.0))
    assert flexed[ELX] - free[ELX] > 0.5 * DEG


def test_loads_set_mid_run_take_effect_at_the_next_step(model):
    a, b = Plant(model, step_s=H), Plant(model, step_s=H)
    run(a, 10)
    run(b, 10)
    b.set_loads(moments=(0.0, 0.0, 0.0, 2.0, 0.0))
    run(a, 1)
    run(b, 1)
    assert b.x[N_DOF + ELX] > a.x[N_DOF + ELX] + 1e-3  # elbow flexion velocity


# ---------------------------------------------------------------------------------------------------
# Determinism, reset and warm-up
# ---------------------------------------------------------------------------------------------------

def _random_excitations(seed, n=100):
    rng = np.random.default_rng(seed)
    return rng.uniform(0.0, 0.3, (n, N_MUS))


def test_determinism_across_plants_and_after_reset(model):
    us = _random_excitations(1234)
    a, b = Plant(model, step_s=H), Plant(model, step_s=H)
    for u in us:
        a.step(u)
    for u in us:
        b.step(u)
    assert np.array_equal(a.x, b.x) and np.array_equal(a.xdot, b.xdot)
    first = a.x.copy()
    a.reset()
    assert a.time == 0.0 and a.steps == 0
    np.testing.assert_array_equal(a.x, model.equilibrium_state)
    for u in us:
        a.step(u)
    assert np.array_equal(a.x, first)
    assert not np.array_equal(first, model.equilibrium_state)


def test_warmup_leaves_the_plant_unchanged(model):
    p = Plant(model, step_s=H)
    before = snapshot(p)
    outputs = {k: np.array(getattr(p.outputs, k)) for k in ("gh_force", "th_angles", "muscle_force")}
    p.warmup()
    assert_unchanged(p, before)
    assert p.time == 0.0
    for k, v in outputs.items():
        np.testing.assert_array_equal(getattr(p.outputs, k), v)
    # and a warmed-up plant steps exactly like a fresh one
    fresh = Plant(model, step_s=H)
    for u in _random_excitations(7, 20):
        p.step(u)
        fresh.step(u)
    assert np.array_equal(p.x, fresh.x)


def test_warmup_mid_run_keeps_time_and_state(plant):
    run(plant, 5, np.full(N_MUS, 0.2))
    before = snapshot(plant)
    plant.warmup()
    assert_unchanged(plant, before)


# ---------------------------------------------------------------------------------------------------
# No allocation in the step
# ---------------------------------------------------------------------------------------------------

@pytest.fixture
def nrt_stats():
    """Numba's NRT allocation counters, switched on for the test (they are off unless NUMBA_NRT_STATS)."""
    was_enabled = _nrt_python.memsys_stats_enabled()
    _nrt_python.memsys_enable_stats()
    yield rtsys.get_allocation_stats
    if not was_enabled:
        _nrt_python.memsys_disable_stats()


@njit
def _allocating_kernel(n):
    return np.ones(n).sum()


def test_step_allocates_nothing(plant, nrt_stats):
    """The NRT counters see every allocation made by compiled code, including one per ndarray argument
    passed in from Python: numba wraps each such array in an NRT MemInfo (counted as one ``alloc`` and one
    ``mi_alloc``, freed when the call returns). So an allocation-free step shows exactly as many
    allocations per call as the step kernel has array arguments, all freed again."""
    u = np.full(N_MUS, 0.1)
    plant.step(u)  # compile / load
    _allocating_kernel(3)
    sig_arrays = {sum(isinstance(t, types.Array) for t in sig) for sig in bundle_step.signatures}
    assert len(sig_arrays) == 1
    n_arrays = sig_arrays.pop()
    assert n_arrays >= 4  # x, xdot, u0, u_in, loads

    # the counters work: a kernel that allocates one array is seen
    s0 = nrt_stats()
    _allocating_kernel(1000)
    s1 = nrt_stats()
    assert s1.alloc - s0.alloc >= 1 and s1.free - s0.free == s1.alloc - s0.alloc

    n = 100
    s0 = nrt_stats()
    for _ in range(n):
        plant.step(u)
    s1 = nrt_stats()
    d_alloc, d_free = s1.alloc - s0.alloc, s1.free - s0.free
    d_mi_alloc, d_mi_free = s1.mi_alloc - s0.mi_alloc, s1.mi_free - s0.mi_free
    assert d_alloc == d_mi_alloc == n * n_arrays, (d_alloc, d_mi_alloc, n_arrays)
    assert d_free == d_alloc and d_mi_free == d_mi_alloc  # nothing kept


def test_step_allocates_no_numpy_arrays(plant):
    u = np.full(N_MUS, 0.1)
    plant.step(u)
    tracemalloc.start()
    try:
        for _ in range(10):
            plant.step(u)
        before = tracemalloc.take_snapshot()
        for _ in range(100):
            plant.step(u)
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    numpy_only = [tracemalloc.DomainFilter(True, np.lib.tracemalloc_domain)]
    grown = [s for s in after.filter_traces(numpy_only).compare_to(before.filter_traces(numpy_only), "lineno")
             if s.count_diff > 0]
    assert grown == []


# ---------------------------------------------------------------------------------------------------
# Output views
# ---------------------------------------------------------------------------------------------------

def test_outputs_are_views_of_the_state(plant):
    out = plant.outputs
    assert np.shares_memory(out.q, plant.x[:N_DOF])
    assert np.shares_memory(out.qdot, plant.x[N_DOF:2 * N_DOF])
    assert np.shares_memory(out.activation, plant.x[2 * N_DOF + N_MUS:])
    q_view = out.q
    plant.step(np.full(N_MUS, 0.5))
    assert plant.outputs is out and out.q is q_view
    np.testing.assert_array_equal(out.q, plant.x[:N_DOF])
    np.testing.assert_array_equal(out.s, plant.x[2 * N_DOF:2 * N_DOF + N_MUS])
    assert out.q.shape == (N_DOF,) and out.activation.shape == (N_MUS,)
    assert out.st_contact_force.shape == (2, 3) and out.th_angles.shape == (3,)


def test_plant_kernels_are_compiled_without_the_nrt():
    """Every kernel of the step is compiled without numba's reference-counting runtime: it cannot allocate
    (a compile error) and pays no atomic reference counts per call (sim/jit/kernel.py). Only the entry points
    that Python calls with the plant's StructRef bundle keep it."""
    import importlib

    from numba.core.registry import CPUDispatcher

    entry_points = {"bundle_prime", "bundle_step"}
    kernels = {}
    for name in ("sim.das3.kernels.dual", "sim.das3.kernels.multibody", "sim.das3.kernels.muscles", "sim.das3.kernels.outputs", "sim.das3.kernels.step", "sim.das3.phases"):
        module = importlib.import_module(name)
        kernels.update({f"{name}.{k}": v for k, v in vars(module).items()
                        if isinstance(v, CPUDispatcher) and v.__module__ == name})
    assert len(kernels) > 30
    with_nrt = sorted(k for k, v in kernels.items() if v.targetoptions.get("_nrt", True)
                      and k.rsplit(".", 1)[1] not in entry_points and not v.targetoptions.get("inline") == "always")
    assert with_nrt == []


def test_phase_timing_leaves_the_plant_unchanged(model):
    """hil bench plant times each phase on the benchmarked plant: the plant must step on exactly as an
    untimed twin does."""
    from sim.das3.phases import PHASES, phase_medians_us

    timed, twin = Plant(model, step_s=0.004), Plant(model, step_s=0.004)
    u = np.full(N_MUS, 0.2)
    for p in (timed, twin):
        p.warmup()
        for _ in range(5):
            p.step(u)
    medians = phase_medians_us(timed, u, batches=3, batch=2)
    assert list(medians) == list(PHASES) and all(v > 0.0 for v in medians.values())
    for _ in range(5):
        timed.step(u)
        twin.step(u)
    assert timed.x.tobytes() == twin.x.tobytes() and timed.xdot.tobytes() == twin.xdot.tobytes()
    assert timed.outputs.gh_force.tobytes() == twin.outputs.gh_force.tobytes()


def test_fibre_correction_re_evaluates_bit_for_bit_like_a_whole_evaluation(model):
    """After the activation scheme's fibre correction, the step refreshes only the corrected muscles' terms
    (``evaluate_corrected``); the residual and Jacobian pieces must equal a whole evaluation at that state."""
    from sim.das3.kernels.step import (
        SCHEME_ACTIVATION,
        apply_step,
        copy_into,
        correct_contraction,
        evaluate_corrected,
        evaluate_step,
        new_plant_work,
        rosenbrock_solve,
    )
    plant, rng = Plant(model, 0.004), np.random.default_rng(3)
    for _ in range(10):
        plant.step(rng.uniform(0.0, 0.4, N_MUS))
    A, W, h = model.arrays, plant.workspace, plant.step_s
    x, xd, u0, u1 = plant.x, plant.xdot, plant.excitation.copy(), rng.uniform(0.0, 0.4, N_MUS)
    assert rosenbrock_solve(A, x, xd, u0, u1, h, SCHEME_ACTIVATION, W) == 0
    copy_into(W.st.x_prev, x)
    copy_into(W.st.xd_prev, xd)
    assert apply_step(x, xd, W.st.dx, h)
    evaluate_step(A, x, xd, u1, plant.loads, W)
    n = correct_contraction(A, x, xd, h, W)
    assert n > 0, "the excitation jump should leave some fibre to correct"
    evaluate_corrected(A, x, xd, n, W)
    whole = new_plant_work(A, h)
    evaluate_step(A, x, xd, u1, plant.loads, whole)
    for name, got, want in [("f", W.st.f, whole.st.f), ("Aq", W.st.Aq, whole.st.Aq), ("tau", W.mu.tau, whole.mu.tau),
                            ("dtau_dq", W.mu.dtau_dq, whole.mu.dtau_dq), ("C", W.mu.C, whole.mu.C),
                            ("dF4", W.mu.dF4, whole.mu.dF4)]:
        assert np.array_equal(got.view(np.uint64), want.view(np.uint64)), name
