"""Where a plant step's time goes: each phase of the step timed on its own, in a compiled loop.

A step (:func:`sim.das3.kernels.step.plant_step`) is: the Rosenbrock solve from the last evaluation (``solve``), the
state update, one evaluation at the new state (``multibody``: kinematics, dynamics and their exact
derivatives; ``muscles``: path polynomials, Hill model, moments and their derivatives; the rest of
:func:`sim.das3.kernels.step.evaluate_step` is the residual assembly and activation rates) and the outputs (``outputs``:
angles, forces, GH lines of action and stability). Each phase is repeated ``batch`` times inside one
compiled call, so neither Python nor the clock is inside what is timed; the figure is the median over
batches of the time per call. None of the timed phases changes the plant's state.
"""
from __future__ import annotations

import time

import numpy as np

from sim.das3.kernels.multibody import multibody_eval
from sim.das3.kernels.muscles import muscle_eval
from sim.das3.kernels.outputs import compute_outputs
from sim.das3.kernels.step import IA, IQ, IQD, IS, evaluate_step, rosenbrock_solve
from sim.das3.plant import SCHEMES
from sim.jit.kernel import kernel

PHASES = ("multibody", "muscles", "evaluate", "solve", "outputs")
"""Timed phases; ``evaluate`` includes ``multibody`` and ``muscles``."""


@kernel
def _repeat_phase(phase, n, A, x, xd, u0, u1, loads, h, scheme, W):
    """Run phase ``phase`` (an index into PHASES) ``n`` times."""
    for _ in range(n):
        if phase == 0:
            multibody_eval(A, x[IQ:IQD], x[IQD:IS], xd[IQD:IS], loads, W.mb)
        elif phase == 1:
            muscle_eval(A, x[IQ:IQD], x[IS:IA], xd[IS:IA], x[IA:], W.mu)
        elif phase == 2:
            evaluate_step(A, x, xd, u0, loads, W)
        elif phase == 3:
            rosenbrock_solve(A, x, xd, u0, u1, h, scheme, W)
        else:
            compute_outputs(A, W)


def phase_medians_us(plant, u: np.ndarray, batches: int = 50, batch: int = 40) -> dict[str, float]:
    """Median time per call of each phase at the plant's current state towards excitation ``u``, µs. The
    plant is left as it was: the evaluations repeat the one its last step ended with (same x, xdot and
    excitation), and the solve writes only scratch that the next step rebuilds."""
    A, W = plant.model.arrays, plant.workspace
    x, xd, u0, loads = plant.x, plant.xdot, plant.excitation, plant.loads
    scheme = SCHEMES[plant.scheme]
    medians = {}
    for index, name in enumerate(PHASES):
        _repeat_phase(index, 1, A, x, xd, u0, u, loads, plant.step_s, scheme, W)
        per_call = np.empty(batches)
        for b in range(batches):
            t0 = time.perf_counter_ns()
            _repeat_phase(index, batch, A, x, xd, u0, u, loads, plant.step_s, scheme, W)
            per_call[b] = (time.perf_counter_ns() - t0) / batch
        medians[name] = float(np.median(per_call)) / 1e3
    return medians
