"""The DAS3 plant as a fixed-step stepper (scipy's ``OdeSolver.step`` role; the HIL loop is the driver).

:class:`Plant` owns one preallocated workspace (``Data``) built from an immutable :class:`Das3Model`
(``Model``) and advances the implicit model f(x, xdot, u) = 0 by the first-order Rosenbrock formula of
Chadwick et al. 2014, eq. 8, with the structured elimination described in :mod:`sim.das3.kernels.step`.

Result semantics (one rule): :attr:`Plant.outputs` and :attr:`Plant.x` are *views* into the workspace,
valid until the next :meth:`Plant.step` or :meth:`Plant.reset`; copy them to keep them.
"""
from __future__ import annotations

import math

import numpy as np

from sim.das3.kernels.step import (
    IA,
    IQ,
    IQD,
    IS,
    SCHEME_ACTIVATION,
    SCHEME_PAPER,
    STEP_BAD_INPUT,
    STEP_FIBRE_COLLAPSE,
    STEP_MESSAGES,
    STEP_OK,
    bundle_prime,
    bundle_step,
    new_plant_work,
    plant_steps,
)
from sim.das3.layout import MUS_EXCITATION_GATE, N_MUS, N_STATES, Das3Model
from sim.jit.bundle import new_bundle
from sim.plants import FixedStepPlant, InvalidInputError, PlantDivergedError

__all__ = ["SCHEMES", "STEP_KERNEL", "ArmPlant", "FixedStepPlant", "InvalidInputError", "Plant", "PlantDivergedError",
           "PlantOutputs", "loads_from_parts"]

SCHEMES = {"activation": SCHEME_ACTIVATION, "paper": SCHEME_PAPER}

STEP_KERNEL = plant_steps
"""The compiled step a compiled caller runs: ``STEP_KERNEL(A, W, *Plant.kernel_args[1:], stale, n)`` with
``Plant.kernel_args[0].items`` unpacked as (A, W); returns (status, excitations clipped, steps done)."""


def loads_from_parts(current: np.ndarray, moments=None, arm_support=None, hand_force=None) -> np.ndarray:
    """The load vector (``sim.das3.layout.LOAD_NAMES`` order) with the given parts replaced and the rest kept."""
    new = current.copy()
    for value, sl, n, name in ((moments, slice(0, 5), 5, "moments"), (arm_support, slice(5, 7), 2, "arm_support"),
                               (hand_force, slice(7, 10), 3, "hand_force")):
        if value is None:
            continue
        arr = np.asarray(value, np.float64).reshape(-1)
        if arr.shape != (n,) or not np.all(np.isfinite(arr)):
            raise InvalidInputError(f"{name} must be {n} finite values")
        new[sl] = arr
    if new[5] < 0.0:
        raise InvalidInputError("arm support distance must be >= 0 m")
    return new


class PlantOutputs:
    """Per-step outputs (SI units, radians). Array attributes are views valid until the next step."""

    __slots__ = ("q", "qdot", "s", "activation", "muscle_force", "muscle_length", "th_angles",
                 "hand_position", "gh_force", "gh_angles", "st_contact_force", "conoid_force", "gh_stability_cell")

    def __init__(self, x: np.ndarray, work) -> None:
        self.q = x[IQ:IQD]
        self.qdot = x[IQD:IS]
        self.s = x[IS:IA]
        self.activation = x[IA:]
        self.muscle_force = work.mu.force        # N
        self.muscle_length = work.mu.L           # m, muscle-tendon length
        self.th_angles = work.out.th_angles      # thoracohumeral YZY: plane of elevation, elevation, axial
        self.hand_position = work.out.hand_position  # m, thorax frame
        self.gh_force = work.out.gh_force        # N on the scapula, scapula frame
        self.gh_angles = work.out.gh_angles      # theta (superior +), phi (anterior-posterior), rad
        self.st_contact_force = work.out.contact_force  # (2, 3) N on the scapula at TS, AI, thorax frame
        self.conoid_force = work.out.conoid_force  # N on the scapula, thorax frame
        self.gh_stability_cell = work.out.gh_stability   # (1,) view of gh_stability, for compiled callers

    @property
    def gh_stability(self) -> float:
        """(theta/theta_a)^2 + (phi/phi_a)^2 - 1 (paper eq. 9): < 0 inside the glenoid rim."""
        return float(self.gh_stability_cell[0])


def _as_state(values, name: str) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.shape != (N_STATES,):
        raise InvalidInputError(f"{name} must have {N_STATES} values, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise InvalidInputError(f"{name} contains NaN or infinite values")
    return arr


class ArmPlant(FixedStepPlant):
    """A plant on the DAS3 arm's external loads (``sim.das3.layout.LOAD_NAMES``), set by part."""

    def set_loads(self, moments=None, arm_support=None, hand_force=None) -> None:
        """External loads, held until changed (spec "State, inputs"):

        moments (5, N m): about the thorax Y, floating Z and humeral Y axes (on the humerus, reaction on
        the thorax), elbow flexion and forearm pronation; arm_support (distance m, vertical force N, +Y
        up) on the ulna below the elbow; hand_force (3, N, thorax frame) at the hand centre of mass.
        """
        self.set_load_vector(loads_from_parts(self._loads, moments, arm_support, hand_force))


class Plant(ArmPlant):
    """Fixed-step DAS3 plant. ``step(u)`` advances by ``step_s`` with excitation u at the step's end.

    Starts from the published passive equilibrium (or ``initial_state``) with xdot = 0 and u = 0.
    ``scheme``: "activation" (default) or "paper" (eq. 8 exactly); see :func:`sim.das3.kernels.step.rosenbrock_solve`.
    Excitations outside [0, 1] are clipped and counted in :attr:`clipped_total`; NaN/inf raise
    :class:`InvalidInputError` without touching the state.
    """

    STATUS_OK = STEP_OK
    STATUS_BAD_INPUT = STEP_BAD_INPUT

    def __init__(self, model: Das3Model, step_s: float = 0.004, initial_state=None,
                 residual_limit: float = 1e6, scheme: str = "activation") -> None:
        if scheme not in SCHEMES:
            raise InvalidInputError(f"scheme must be one of {', '.join(SCHEMES)}, got {scheme!r}")
        super().__init__(model, step_s, N_STATES, N_MUS)
        self.scheme = scheme
        self._scheme_code = SCHEMES[scheme]
        self.residual_limit = float(residual_limit)
        self._work = new_plant_work(model.arrays, step_s)
        self._bundle = new_bundle((model.arrays, self._work))
        self._xd = np.zeros(N_STATES)
        self.outputs = PlantOutputs(self._x, self._work)
        self.reset(initial_state)

    @property
    def xdot(self) -> np.ndarray:
        return self._xd

    def reset(self, initial_state=None, xdot=None, excitation=None) -> None:
        """Restart at t = 0 from ``initial_state`` (default: the published passive equilibrium)."""
        x0 = self.model.equilibrium_state if initial_state is None else _as_state(initial_state, "initial state")
        xd0 = np.zeros(N_STATES) if xdot is None else _as_state(xdot, "initial xdot")
        u0 = np.zeros(N_MUS) if excitation is None else np.asarray(excitation, np.float64)
        if u0.shape != (N_MUS,) or not np.all(np.isfinite(u0)):
            raise InvalidInputError(f"initial excitation must be {N_MUS} finite values")
        self._x[:] = x0
        self._xd[:] = xd0
        self._u[:] = np.clip(u0, 0.0, 1.0) * self.model.arrays.mus[:, MUS_EXCITATION_GATE]   # as plant_steps
        self._work.rx.ring[:] = 0.0                  # the stretch reflex starts from a still arm
        self._work.rx.cursor[:] = 0
        self.steps = 0
        self.failed = False
        r = bundle_prime(self._bundle, self._x, self._xd, self._u, self._loads)
        if not math.isfinite(r):
            self.failed = True
            raise PlantDivergedError("the initial state gives a non-finite residual")
        self._stale = False

    def loads_changed(self) -> None:
        self._stale = True

    def advance(self, u: np.ndarray, stale: bool) -> tuple[int, int, int]:
        status, n_clipped = bundle_step(self._bundle, self._x, self._xd, self._u, u, self._loads,
                                        self.step_s, self.residual_limit, self._scheme_code, stale)
        return status, n_clipped, 1 if status == STEP_OK else 0

    # -- stepping from a compiled caller ------------------------------------------------------------
    @property
    def kernel_args(self) -> tuple:
        """(bundle, x, xdot, u, loads, step_s, residual_limit, scheme code): the arguments after which a
        compiled caller passes (stale, n) to :data:`STEP_KERNEL` with ``bundle.items`` unpacked
        as (A, W). Bracket the call with :meth:`begin_steps` and :meth:`finish_steps`."""
        return (self._bundle, self._x, self._xd, self._u, self._loads, self.step_s, self.residual_limit,
                self._scheme_code)

    def failure_message(self, status: int) -> str:
        what = STEP_MESSAGES[status]
        if status == STEP_FIBRE_COLLAPSE:
            what = f"{self.model.muscle_names[self._work.st.failed_muscle[0]]}: {what}"
        return what

    def state_arrays(self) -> tuple:
        return self._x, self._xd, self._u, self._work.rx.ring, self._work.rx.cursor

    def refresh_outputs(self) -> None:
        bundle_prime(self._bundle, self._x, self._xd, self._u, self._loads)
        self._stale = False
