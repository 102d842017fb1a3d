"""The Python entry points hand the kernels one array type (``sim.jit.kernel.writable``): a read-only input (a
model's published equilibrium, a slice of a read-only table) must not reach a kernel, where numba would compile,
and cache, a second copy of every kernel below it for the read-only type."""
from __future__ import annotations

import numpy as np
from numba import types

from sim.das3 import dynamics
from sim.das3.config import ModelConfig
from sim.das3.kernels.step import bundle_step, evaluate
from sim.das3.layout import LOAD_NAMES
from sim.das3.plant import Plant
from sim.das3.reference import ReferenceModel, _explicit_rates
from sim.jit.kernel import writable
from sim.mtg.arm import bias_and_mass, generalized_forces, kinematics
from sim.mtg.model import mtg_model_for
from sim.patient import Patient


def read_only(values) -> np.ndarray:
    arr = np.array(values, dtype=np.float64)
    arr.flags.writeable = False
    return arr


def read_only_arrays(dispatcher) -> list:
    """The read-only array arguments of every signature ``dispatcher`` was compiled for from Python."""
    return [(sig, i) for sig in dispatcher.signatures for i, arg in enumerate(sig)
            if isinstance(arg, types.Array) and not arg.mutable]


def test_writable_passes_a_writable_array_through_and_copies_the_rest():
    a = np.zeros(4)
    assert writable(a) is a
    ro = read_only([1.0, 2.0])
    out = writable(ro)
    assert out is not ro and out.flags.writeable and np.array_equal(out, ro)
    strided = np.arange(8.0)[::2]
    assert writable(strided).flags.c_contiguous and writable([1, 2]).dtype == np.float64


def test_a_read_only_excitation_steps_the_das3_plant_through_the_writable_kernel(model):
    plant = Plant(model, 0.004)
    plant.step(read_only(np.full(model.n_muscles, 0.05)))
    assert bundle_step.signatures and not read_only_arrays(bundle_step)


def test_the_dynamics_and_the_reference_take_the_published_equilibrium_as_it_is(model):
    x = model.equilibrium_state
    assert not x.flags.writeable                    # the model's state is read-only by design
    dynamics.residual(model, x, np.zeros_like(x), np.zeros(model.n_muscles))
    ReferenceModel(model, lambda t: read_only(np.zeros(model.n_muscles))).rhs(0.0, x)
    assert not read_only_arrays(evaluate) and not read_only_arrays(_explicit_rates)


def test_the_mtg_arm_is_built_on_the_writable_multibody_kernel(model):
    """The MTG arm's frozen girdle comes from the DAS3 kinematics at the published (read-only) equilibrium."""
    from sim.das3.kernels.multibody import multibody_eval
    from sim.mtg.model import _frozen_girdle
    _frozen_girdle(model)
    assert multibody_eval.signatures and not read_only_arrays(multibody_eval)


def test_the_mtg_arm_takes_read_only_postures():
    arm = mtg_model_for(ModelConfig(), Patient())
    q = read_only(arm.equilibrium_state[:5])
    arm.generalized_forces(q, read_only(np.zeros(5)))
    arm.inverse_dynamics(q, read_only(np.zeros(5)), read_only(np.zeros(5)), read_only(np.zeros(len(LOAD_NAMES))))
    arm.shoulder_axes(q)
    assert not any(read_only_arrays(f) for f in (generalized_forces, bias_and_mass, kinematics))
