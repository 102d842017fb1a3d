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
)
from sim.das3.model import LOAD_NAMES, N_LOADS, N_MUS, N_STATES, Das3Model
from sim.errors import UserInputError
from sim.jit.bundle import new_bundle

SCHEMES = {"activation": SCHEME_ACTIVATION, "paper": SCHEME_PAPER}


class InvalidInputError(UserInputError, ValueError):
    """An input (excitation, load, state) is malformed or not finite; the plant state is unchanged."""


class PlantDivergedError(RuntimeError):
    """The simulation diverged (non-finite state, residual blow-up or singular iteration matrix).

    The plant keeps the last good state and refuses further steps until :meth:`Plant.reset`."""


def loads_from_parts(current: np.ndarray, moments=None, arm_support=None, hand_force=None) -> np.ndarray:
    """The load vector (``sim.das3.model.LOAD_NAMES`` order) with the given parts replaced and the rest kept."""
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


class FixedStepPlant:
    """What every plant shares: the step size, the step and clipping counters, the state, excitation and load
    vectors, the workspace, and the bracket of a compiled caller's steps (:meth:`begin_steps`,
    :meth:`finish_steps`, :meth:`warmup`). Subclasses fill ``_work`` and ``outputs``, step them, name their
    kernels' status codes and say what a failure means (:meth:`failure_message`)."""

    STATUS_OK = 0
    STATUS_BAD_INPUT = -1       # the subclass's kernels' code for a non-finite excitation

    def __init__(self, model, step_s: float, n_states: int, n_muscles: int) -> None:
        if not (isinstance(step_s, (int, float)) and math.isfinite(step_s) and 1e-5 <= step_s <= 0.02):
            raise InvalidInputError(f"step_s must be between 1e-5 and 0.02 s, got {step_s!r}")
        self.model = model
        self.step_s = float(step_s)
        self._x = np.zeros(n_states)
        self._u = np.zeros(n_muscles)
        self._loads = np.zeros(N_LOADS)
        self.clipped_total = 0
        self.steps = 0
        self.failed = False
        self._stale = False         # the first step must re-evaluate (the loads changed)

    @property
    def x(self) -> np.ndarray:
        """The state (view)."""
        return self._x

    @property
    def workspace(self):
        """The per-run workspace the kernels write (read it for analyses, never write it)."""
        return self._work

    @property
    def excitation(self) -> np.ndarray:
        """The excitation applied at the end of the last step (view)."""
        return self._u

    @property
    def time(self) -> float:
        return self.steps * self.step_s

    @property
    def loads(self) -> np.ndarray:
        """Copy of the external loads, in the order of ``sim.das3.model.LOAD_NAMES``."""
        return self._loads.copy()

    def set_loads(self, moments=None, arm_support=None, hand_force=None) -> None:
        """External loads, held until changed (spec "State, inputs"):

        moments (5, N m): about the thorax Y, floating Z and humeral Y axes (on the humerus, reaction on
        the thorax), elbow flexion and forearm pronation; arm_support (distance m, vertical force N, +Y
        up) on the ulna below the elbow; hand_force (3, N, thorax frame) at the hand centre of mass.
        """
        self.set_load_vector(loads_from_parts(self._loads, moments, arm_support, hand_force))

    def set_load_vector(self, loads) -> None:
        """All 10 loads at once, ordered as ``sim.das3.model.LOAD_NAMES``."""
        arr = np.asarray(loads, np.float64)
        if arr.shape != (N_LOADS,) or not np.all(np.isfinite(arr)):
            raise InvalidInputError(f"loads must be {N_LOADS} finite values: {', '.join(LOAD_NAMES)}")
        if not np.array_equal(arr, self._loads):
            self._loads[:] = arr
            self.loads_changed()

    def loads_changed(self) -> None:
        """Called when the loads change (the DAS3 plant then re-evaluates before its next step)."""

    # -- stepping from a compiled caller --------------------------------------------------------------
    def begin_steps(self) -> bool:
        """Refuse a diverged plant; returns whether the first step must re-evaluate (the loads changed)."""
        if self.failed:
            raise PlantDivergedError("the plant diverged earlier; call reset() first")
        return self._stale

    def finish_steps(self, status: int, n_clipped: int, n_done: int, u: np.ndarray) -> None:
        """Book ``n_done`` good steps (``n_clipped`` clipped excitations) and raise if a step failed with
        ``status`` (the plant then keeps its last good state and refuses to step until reset)."""
        if n_done:
            self._stale = False
        self.clipped_total += n_clipped
        self.steps += n_done
        if status == self.STATUS_OK:
            return
        if status == self.STATUS_BAD_INPUT:
            bad = [self.model.muscle_names[i] for i in np.flatnonzero(~np.isfinite(u))[:5]]
            raise InvalidInputError(f"excitation is NaN or infinite for {', '.join(bad)}")
        self.failed = True
        raise PlantDivergedError(f"step {self.steps + 1} (t = {self.time + self.step_s:.4f} s): "
                                 f"{self.failure_message(status)}; state kept at t = {self.time:.4f} s")

    def failure_message(self, status: int) -> str:
        """What a failed step's ``status`` means."""
        raise NotImplementedError

    def warmup(self, run_step=None) -> None:
        """Compile (or load from cache) and run every kernel once; the plant state is unchanged.

        ``run_step``: what steps the plant (default: one ``step`` holding the excitation), e.g. a compiled
        caller of the plant's kernels warming up its own kernel."""
        arrays = self.state_arrays()
        saved = [a.copy() for a in arrays], self.steps, self.clipped_total
        if run_step is None:
            self.step(self._u.copy())
        else:
            run_step()
        for a, copy in zip(arrays, saved[0]):
            a[:] = copy
        self.steps, self.clipped_total = saved[1], saved[2]
        self.refresh_outputs()

    def state_arrays(self) -> tuple:
        """The arrays a step changes (restored after :meth:`warmup`)."""
        return self._x, self._u

    def refresh_outputs(self) -> None:
        """Outputs (and derivatives) of the current state, after it was set from outside a step."""
        raise NotImplementedError


class Plant(FixedStepPlant):
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
        self._work = new_plant_work(model.arrays)
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
            raise InvalidInputError("initial excitation must be 138 finite values")
        self._x[:] = x0
        self._xd[:] = xd0
        self._u[:] = np.clip(u0, 0.0, 1.0)
        self.steps = 0
        self.failed = False
        r = bundle_prime(self._bundle, self._x, self._xd, self._u, self._loads)
        if not math.isfinite(r):
            self.failed = True
            raise PlantDivergedError("the initial state gives a non-finite residual")
        self._stale = False

    def loads_changed(self) -> None:
        self._stale = True

    # -- stepping --------------------------------------------------------------------------------
    def step(self, u: np.ndarray) -> None:
        """Advance one step; ``u`` (138,) is the excitation at the end of the step (u_{n+1})."""
        stale = self.begin_steps()
        if not (isinstance(u, np.ndarray) and u.dtype == np.float64 and u.shape == (N_MUS,)):
            u = np.asarray(u, dtype=np.float64)
            if u.shape != (N_MUS,):
                raise InvalidInputError(f"excitation must have {N_MUS} values, got shape {u.shape}")
        status, n_clipped = bundle_step(self._bundle, self._x, self._xd, self._u, u, self._loads,
                                        self.step_s, self.residual_limit, self._scheme_code, stale)
        self.finish_steps(status, n_clipped, 1 if status == STEP_OK else 0, u)

    # -- stepping from a compiled caller ------------------------------------------------------------
    @property
    def kernel_args(self) -> tuple:
        """(bundle, x, xdot, u, loads, step_s, residual_limit, scheme code): the arguments after which a
        compiled caller passes (stale, n) to :func:`sim.das3.kernels.step.plant_steps` with ``bundle.items`` unpacked
        as (A, W). Bracket the call with :meth:`begin_steps` and :meth:`finish_steps`."""
        return (self._bundle, self._x, self._xd, self._u, self._loads, self.step_s, self.residual_limit,
                self._scheme_code)

    def failure_message(self, status: int) -> str:
        what = STEP_MESSAGES[status]
        if status == STEP_FIBRE_COLLAPSE:
            what = f"{self.model.muscle_names[self._work.st.failed_muscle[0]]}: {what}"
        return what

    def state_arrays(self) -> tuple:
        return self._x, self._xd, self._u

    def refresh_outputs(self) -> None:
        bundle_prime(self._bundle, self._x, self._xd, self._u, self._loads)
        self._stale = False
