"""What every plant is: a fixed-step stepper of an immutable model, driven one step (or one compiled batch of
steps) at a time by a caller that owns the clock (scipy's ``OdeSolver.step`` role; the HIL loop is the driver).

A plant's model provides ``kind`` (its registered type, ``hil.rt.plants``), ``dof_names`` and ``dof_ranges``
(the sensor frame's joints, rad), ``muscle_names`` (its actuators, one excitation each), ``n_muscles``,
``n_states``, ``equilibrium_state`` (where a run starts by default), ``load_names`` (its external loads),
``has_glenohumeral`` (the GH joint force and stability are modelled: the GH rules and the glenoid figure apply),
``segment_model`` (the DAS3 model of its segments, whose kinematics take the frame's q: the IMUs, the pictures),
``voluntary_reach(patient)`` (how much of each actuator the patient's own drive reaches, 0 to 1) and
``data_sha256`` (what a recording names as its parameters). A plant provides ``outputs`` (views of the arm
frame's quantities: ``q``, ``qdot``, ``th_angles``, ``hand_position``, ``gh_force``, ``st_contact_force``,
``gh_stability_cell``, NaN where not modelled) and ``kernel_args`` (what its compiled step takes).

Result semantics (one rule): ``outputs`` and :attr:`FixedStepPlant.x` are *views* into the plant's workspace,
valid until the next step or reset; copy them to keep them.
"""
from __future__ import annotations

import math

import numpy as np

from sim.errors import UserInputError
from sim.jit.kernel import writable


class InvalidInputError(UserInputError, ValueError):
    """An input (excitation, load, state) is malformed or not finite; the plant state is unchanged."""


class PlantDivergedError(RuntimeError):
    """The simulation diverged (non-finite state, residual blow-up or singular iteration matrix).

    The plant keeps the last good state and refuses further steps until it is reset."""


class FixedStepPlant:
    """What every plant shares: the step size, the step and clipping counters, the state, excitation and load
    vectors, the one template :meth:`step` (validate the excitation, begin, advance, finish) and the bracket of a
    compiled caller's steps (:meth:`begin_steps`, :meth:`finish_steps`, :meth:`warmup`). Subclasses fill
    ``_work`` and ``outputs``, advance them (:meth:`advance`), name their kernels' status codes and say what a
    failure means (:meth:`failure_message`)."""

    STATUS_OK = 0
    STATUS_BAD_INPUT = -1       # the subclass's kernels' code for a non-finite excitation

    def __init__(self, model, step_s: float, n_states: int, n_muscles: int) -> None:
        if not (isinstance(step_s, (int, float)) and math.isfinite(step_s) and 1e-5 <= step_s <= 0.02):
            raise InvalidInputError(f"step_s must be between 1e-5 and 0.02 s, got {step_s!r}")
        self.model = model
        self.step_s = float(step_s)
        self._x = np.zeros(n_states)
        self._u = np.zeros(n_muscles)
        self._loads = np.zeros(len(model.load_names))
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
        """Copy of the external loads, in the order of the model's ``load_names``."""
        return self._loads.copy()

    def set_load_vector(self, loads) -> None:
        """All loads at once, ordered as the model's ``load_names``."""
        arr = np.asarray(loads, np.float64)
        if arr.shape != self._loads.shape or not np.all(np.isfinite(arr)):
            raise InvalidInputError(f"loads must be {self._loads.shape[0]} finite values: "
                                    f"{', '.join(self.model.load_names)}")
        if not np.array_equal(arr, self._loads):
            self._loads[:] = arr
            self.loads_changed()

    def loads_changed(self) -> None:
        """Called when the loads change (a plant that caches an evaluation re-evaluates before its next step)."""

    # -- stepping --------------------------------------------------------------------------------
    def step(self, u) -> None:
        """Advance one step; ``u`` (n_muscles,) is the excitation at the end of the step (u_{n+1}): validate
        ``u``, refuse a diverged plant, advance, book the step (or raise as :meth:`finish_steps` says)."""
        u = self.excitation_input(u)
        stale = self.begin_steps()
        status, n_clipped, n_done = self.advance(u, stale)
        self.finish_steps(status, n_clipped, n_done, u)

    def excitation_input(self, u) -> np.ndarray:
        """``u`` as a float64 array of one value per actuator (its finiteness is the kernel's to check), of the
        type the step is compiled for (:func:`sim.jit.kernel.writable`)."""
        u = writable(u)
        if u.shape != self._u.shape:
            raise InvalidInputError(f"excitation must have {self._u.shape[0]} values, got shape {u.shape}")
        return u

    def advance(self, u: np.ndarray, stale: bool) -> tuple[int, int, int]:
        """One step with excitation ``u`` by the plant's kernel; (status, excitations clipped, steps done)."""
        raise NotImplementedError

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
