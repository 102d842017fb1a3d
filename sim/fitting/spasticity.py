"""The catch test of a spastic elbow and the stretch-reflex gain fitted to published torques (issue 37).

**Test**: the constant-velocity passive elbow extension of the clinical spasticity scales and the instrumented
protocols (Tardieu; McPherson et al. 2018, Exp Brain Res 237:121-135, ramps of 15-150 deg/s; Sci Rep 2017,
PMC5345015: 50 deg of extension at 5 or 100 deg/s). A stiff servo moment on the elbow load,
M = K (q_ref - q) + B (qdot_ref - qdot), holds the elbow at 90 deg, then extends it to 40 deg at a constant
velocity and holds it there; the other joints are free and nothing is stimulated. The **reflex moment** is the
servo moment of the spastic arm minus that of the same arm without reflex (its sign: resisting the extension).

**Fit**: the gain at which the peak reflex moment of the 100 deg/s extension equals the 3.46 N m by which the
resistive elbow torque at 100 deg/s exceeded that at 5 deg/s in 14 people with chronic hemiplegia (6.28 ± 1.01
vs 2.82 ± 0.41 N m, PMC5345015), the whole difference taken as reflex (the study does not separate a viscous
part).
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from sim.das3.kernels.polynomials import readonly
from sim.das3.model import DOF_NAMES, MUS_REFLEX_GAIN, Das3Model, reflex_parameters
from sim.das3.plant import Plant

ELBOW = DOF_NAMES.index("ELx")
SERVO_STIFFNESS = 200.0         # N m/rad
SERVO_DAMPING = 5.0             # N m s/rad
START_DEG, END_DEG = 90.0, 40.0
SETTLE_S, HOLD_S = 2.0, 0.5
TARGET_REFLEX_NM = 6.28 - 2.82
FAST_DEG_S, SLOW_DEG_S = 100.0, 5.0
STEP_S = 0.004                  # s, the plant step of the test


def servo_moments(model, speed_deg_s: float, step_s: float = STEP_S, plant_of=Plant
                  ) -> tuple[np.ndarray, np.ndarray, slice]:
    """(servo moment on the elbow, N m, and elbow angle, rad, at each step; the steps of the extension) of the
    test at ``speed_deg_s``: SETTLE_S to reach and hold 90 deg from rest, the ramp to 40 deg, HOLD_S there.
    ``plant_of(model, step_s=...)``: the plant (an arm plant whose outputs give the DAS3 DOFs; default the DAS3
    one, :class:`sim.mtg.plant.MtgPlant` for the reduced arm)."""
    plant = plant_of(model, step_s=step_s)
    q, qdot = plant.outputs.q, plant.outputs.qdot
    q_rest, start, end = q[ELBOW], math.radians(START_DEG), math.radians(END_DEG)
    ramp_s = (START_DEG - END_DEG) / speed_deg_s
    n, first = int(round((SETTLE_S + ramp_s + HOLD_S) / step_s)), int(round(SETTLE_S / step_s))
    moment, angle, u = np.zeros(n), np.zeros(n), np.zeros(model.n_muscles)
    for k in range(n):
        t = k * step_s
        q_ref, v_ref = _reference(t, q_rest, start, end, ramp_s)
        moment[k] = SERVO_STIFFNESS * (q_ref - q[ELBOW]) + SERVO_DAMPING * (v_ref - qdot[ELBOW])
        plant.set_loads(moments=(0.0, 0.0, 0.0, moment[k], 0.0))
        plant.step(u)
        angle[k] = q[ELBOW]
    return moment, angle, slice(first, first + int(round(ramp_s / step_s)))


def _reference(t: float, q_rest: float, start: float, end: float, ramp_s: float) -> tuple[float, float]:
    """(angle, velocity) the servo follows at time t: rest -> start over the first half of SETTLE_S, held, the
    ramp, held."""
    if t < SETTLE_S:
        return q_rest + (start - q_rest) * min(1.0, 2.0 * t / SETTLE_S), 0.0
    if t < SETTLE_S + ramp_s:
        return start + (end - start) * (t - SETTLE_S) / ramp_s, (end - start) / ramp_s
    return end, 0.0


def reflex_moment(spastic: Das3Model, still: Das3Model | np.ndarray, speed_deg_s: float) -> np.ndarray:
    """The reflex moment (N m, resisting extension positive) over the extension and HOLD_S after it; ``still``:
    the arm without reflex, or its servo moments at this speed."""
    return catch_test(spastic, still, speed_deg_s)[1]


def catch_test(spastic, still, speed_deg_s: float, plant_of=Plant) -> tuple[np.ndarray, np.ndarray]:
    """(elbow angle of the spastic arm, rad, and the reflex moment, N m) from the start of the extension at
    ``speed_deg_s`` to HOLD_S after it (:func:`reflex_moment`); ``plant_of`` as in :func:`servo_moments`."""
    with_reflex, angle, ramp = servo_moments(spastic, speed_deg_s, plant_of=plant_of)
    without = still if isinstance(still, np.ndarray) else servo_moments(still, speed_deg_s, plant_of=plant_of)[0]
    return angle[ramp.start:], (without - with_reflex)[ramp.start:]


def with_reflex(model: Das3Model, spasticity: tuple) -> Das3Model:
    """``model`` with the stretch reflexes ``spasticity`` ((name, gain, threshold, delay) tuples) instead of its
    own: the same rest state (the reflex is silent at rest), so no equilibrium is solved again."""
    mus = np.array(model.arrays.mus)
    mus[:, MUS_REFLEX_GAIN:] = reflex_parameters(spasticity, model.muscle_names)
    return replace(model, config=replace(model.config, spasticity=spasticity),
                   arrays=model.arrays._replace(mus=readonly(mus)))


def fit_gain(model: Das3Model, groups: tuple[str, ...], threshold: float, delay_s: float,
             target_nm: float = TARGET_REFLEX_NM, iterations: int = 16) -> tuple[float, float]:
    """(gain, the peak reflex moment it gives at FAST_DEG_S) with which ``groups``' reflex (``threshold`` in
    Lceopt/s, ``delay_s``) makes the peak reflex moment of the fast extension ``target_nm``: bisection on the
    gain (the peak rises with it), bracketed by doubling from 0.1."""
    still = servo_moments(with_reflex(model, ()), FAST_DEG_S)[0]

    def peak(gain: float) -> float:
        spastic = with_reflex(model, tuple((g, gain, threshold, delay_s) for g in groups))
        return float(np.max(reflex_moment(spastic, still, FAST_DEG_S)))

    lo, hi = 0.0, 0.1
    while peak(hi) < target_nm:
        lo, hi = hi, 2.0 * hi
        if hi > 1e3:
            raise ValueError(f"no gain up to {hi:g} gives a reflex moment of {target_nm:g} N m")
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if peak(mid) < target_nm else (lo, mid)
    return hi, peak(hi)
