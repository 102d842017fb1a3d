"""The reduced muscle-torque-generator arm as a fixed-step plant with the DAS3 plant's interface
(:class:`sim.das3.plant.Plant`): ``step(u)`` with one excitation per MTG, the same outputs where they exist, the
same loads, ``kernel_args`` for a compiled caller of :data:`STEP_KERNEL` (the mtg plant type of ``hil.rt.plants``).

What the reduced arm does not model is reported as NaN: the GH joint force, its stability and the
scapulothoracic contact forces (there is no scapula in motion and no muscle line of action).

Result semantics as for the DAS3 plant: :attr:`MtgPlant.outputs` and :attr:`MtgPlant.x` are views into the
workspace, valid until the next step or reset.
"""
from __future__ import annotations

import math

import numpy as np

from sim.das3.plant import ArmPlant
from sim.jit.bundle import new_bundle
from sim.mtg.arm import new_mtg_work
from sim.mtg.model import MtgModel
from sim.mtg.reflex import reflex_delay_steps
from sim.mtg.step import MTG_STEP_BAD_INPUT, MTG_STEP_MESSAGES, MTG_STEP_OK, bundle_refresh, bundle_steps, mtg_steps
from sim.plants import InvalidInputError

MTG_SCHEME = "linearly-implicit-euler"

STEP_KERNEL = mtg_steps
"""The compiled step a compiled caller runs: ``STEP_KERNEL(A, W, *MtgPlant.kernel_args[1:], u, n)`` with
``MtgPlant.kernel_args[0].items`` unpacked as (A, W); returns (status, excitations clipped, steps done)."""


class MtgOutputs:
    """Per-step outputs (SI units, radians); arrays are views valid until the next step."""

    __slots__ = ("q", "qdot", "activation", "muscle_force", "th_angles", "hand_position", "gh_force",
                 "st_contact_force", "gh_stability_cell", "coordinates", "coordinate_rates")

    def __init__(self, x: np.ndarray, work) -> None:
        self.q = work.q11                    # DAS3 DOF order: girdle frozen, GH derived, ELx, PSy
        self.qdot = work.qd11
        self.coordinates = x[0:5]            # plane of elevation, elevation, axial rotation, elbow, pronation
        self.coordinate_rates = x[5:10]
        self.activation = x[10:]
        self.muscle_force = work.tau         # MTG torques along their directions, N m
        self.th_angles = work.th_angles
        self.hand_position = work.hand_position
        self.gh_force = np.full(3, math.nan)            # not modelled
        self.st_contact_force = np.full((2, 3), math.nan)
        self.gh_stability_cell = np.full(1, math.nan)

    @property
    def gh_stability(self) -> float:
        return math.nan


class MtgPlant(ArmPlant):
    """Fixed-step MTG arm. ``step(u)`` advances by ``step_s`` with the MTG excitations u at the step's end.

    Starts from the model's resting state (or ``initial_state``: q (5), qd (5), a (n)). Excitations outside
    [0, 1] are clipped and counted; NaN/inf raise :class:`InvalidInputError` without touching the state.
    """

    scheme = MTG_SCHEME
    STATUS_OK = MTG_STEP_OK
    STATUS_BAD_INPUT = MTG_STEP_BAD_INPUT

    def __init__(self, model: MtgModel, step_s: float = 0.004, initial_state=None) -> None:
        super().__init__(model, step_s, model.n_states, model.n_muscles)
        self._work = new_mtg_work(model.arrays.body_mass.shape[0], model.n_muscles,
                                  reflex_delay_steps(model.reflex.delay_s, step_s))
        self._bundle = new_bundle((model.arrays, self._work))
        self.outputs = MtgOutputs(self._x, self._work)
        self.reset(initial_state)

    def reset(self, initial_state=None) -> None:
        """Restart at t = 0 from ``initial_state`` (default: the model's resting state)."""
        if initial_state is None:
            x0 = self.model.equilibrium_state
        else:
            x0 = np.asarray(initial_state, dtype=np.float64)
            if x0.shape != (self.model.n_states,) or not np.all(np.isfinite(x0)):
                raise InvalidInputError(f"initial state must be {self.model.n_states} finite values "
                                        "(q 5, qd 5, activations)")
            problem = self.model.state_problem(x0)
            if problem is not None:
                raise InvalidInputError(f"initial state: {problem}")
        self._x[:] = x0
        self._u[:] = 0.0
        self._work.rx_ring[:] = 0.0                  # the stretch reflex starts from a still arm
        self._work.rx_cursor[:] = 0
        self.steps = 0
        self.failed = False
        self.refresh_outputs()

    def advance(self, u: np.ndarray, stale: bool) -> tuple[int, int, int]:
        return bundle_steps(self._bundle, self._x, self._u, u, self._loads, self.step_s, 1)

    @property
    def kernel_args(self) -> tuple:
        """(bundle, x, applied excitation, loads, step_s) for :data:`STEP_KERNEL` from a compiled
        caller (``bundle.items`` unpacked as (A, W)); bracket the call with begin_steps/finish_steps."""
        return self._bundle, self._x, self._u, self._loads, self.step_s

    def failure_message(self, status: int) -> str:
        return MTG_STEP_MESSAGES[status]

    def state_arrays(self) -> tuple:
        return self._x, self._u, self._work.rx_ring, self._work.rx_cursor

    def refresh_outputs(self) -> None:
        bundle_refresh(self._bundle, self._x)
