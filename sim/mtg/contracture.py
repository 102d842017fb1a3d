"""A contracture on the reduced MTG arm: the extra passive moment of the contracted DAS3 elements, per coordinate.

A contracture shortens an element's passive slack length by c_i Lceopt_i (:func:`sim.das3.model.pee_slack_shift`).
On the MTG arm it adds, to each coordinate c a contracted element crosses, the change of that element's passive
moment, with the element's actual passive state at each angle:

    dT_c(theta_c) = sum_i r_ic(theta) (F_i(L_i(theta); PEEslack_i - c_i) - F_i(L_i(theta); PEEslack_i))

r_ic = -dL_i/dtheta_c (the moment arm, :func:`sim.mtg.patient.coordinate_arms`: central differences of the DAS3
path polynomials with the girdle frozen as in the MTG arm), and F_i(L; slack) the element's force at rest with no activation: Fmax F4 at the contraction
state s where the DAS3 Hill element at path length L is in equilibrium with a = 0 and sdot = 0
(:func:`passive_force`: the root of the contraction residual g = F4 - F3 cos(p),
:func:`sim.das3.kernels.muscles.contraction`). An element whose passive part stays slack at an angle, even
shortened, adds (almost) nothing there, which is why a linear shift of the MTG passive curves cannot stand in for it
(docs/concepts/patients.md "On the MTG arm").

Like the MTG's own passive curves (Millard et al. 2019 Eq. (6): a function of the MTG's own angle), dT_c is a
function of theta_c alone: the other coordinates stay at :func:`table_posture`, the arm's rest posture
(plane of elevation at :data:`PLANE_ELEVATION_RAD`, where the plane is defined). It is tabulated at
:data:`KNOT_STEP_RAD` over :data:`TABLE_RANGES_RAD` and evaluated as a cubic Hermite spline (value and slope at
each knot: C1, so that the step's stiffness dT/dtheta is continuous), continued linearly beyond the ends. The
table is a *proposal* of this project: no source reduces a contracture to joint actuators.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from sim.das3.kernels.muscles import contraction, solve_contraction
from sim.das3.layout import MUS_FMAX, MUS_LCEOPT, MUS_PEESLACK, MUS_SEESLACK
from sim.das3.model import pee_slack_shift
from sim.mtg.patient import coordinate_arms, das3_angles, path_lengths

DEG = math.pi / 180.0
TABLE_RANGES_RAD = ((-30.0 * DEG, 120.0 * DEG), (10.0 * DEG, 150.0 * DEG), (-90.0 * DEG, 60.0 * DEG), None, None)
"""Tabulated range of each coordinate (plane of elevation, elevation, axial rotation): the ranges of the DAS3 passive
sweeps the MTG passive curves come from (``sim.fitting.das3_passive.SWEEPS_DEG``); None: the DAS3 DOF's range
(elbow flexion, pronation)."""
PLANE_ELEVATION_RAD = 60.0 * DEG
"""Elevation at which the plane-of-elevation row is tabulated (near 0 the plane is undefined;
``sim.fitting.das3_passive.PLANE_SWEEP_ELEVATION_RAD``)."""
KNOT_STEP_RAD = 2.0 * DEG
"""Knot spacing of the tables (the contracted elements' passive force changes over tens of degrees)."""
SLOPE_STEP_RAD = 1e-4
"""Central-difference step of a knot's slope dT/dtheta (T itself from moment arms by central differences at
``sim.mtg.patient.STEP_RAD``: a larger step here keeps their round-off out of the slope)."""
RESIDUAL_TOL = 1e-12
"""|g| (force / Fmax) at which the passive equilibrium is solved."""
MAX_ITER = 200


class ContractureTable(NamedTuple):
    """Per coordinate: first knot (rad), knot spacing (rad), and values (N m) and slopes (N m/rad) at the knots
    (``n_knots`` 0 for a coordinate without contracture)."""

    start: np.ndarray      # (5,)
    step: np.ndarray       # (5,)
    n_knots: np.ndarray    # (5,) int
    value: np.ndarray      # (5, k)
    slope: np.ndarray      # (5, k)


def no_contracture() -> ContractureTable:
    return ContractureTable(np.zeros(5), np.ones(5), np.zeros(5, np.int64), np.zeros((5, 0)), np.zeros((5, 0)))


def passive_force(P: np.ndarray, length: float) -> float:
    """F (N) of the DAS3 element with parameter row P at rest with a = 0 at path length ``length``: Fmax F4 at
    the root in s of the contraction residual g(L, s, 0, 0) (:func:`sim.das3.kernels.muscles.contraction`),
    found by the plant's own bracketed Newton (:func:`sim.das3.kernels.muscles.solve_contraction`) from the
    state with a slack tendon; a root not found is an error, never a guess."""
    free = (length - P[MUS_SEESLACK]) / P[MUS_LCEOPT]
    s, converged = solve_contraction(P, length, 0.0, 0.0, 1.0, 0.0, 0.0, free, RESIDUAL_TOL, MAX_ITER)
    if not converged:
        raise ArithmeticError(f"no passive equilibrium of an element at path length {length:.4g} m")
    return P[MUS_FMAX] * contraction(P, length, s, 0.0, 0.0)[4]


def table_posture(rest_theta: np.ndarray, c: int) -> np.ndarray:
    """The MTG coordinates at which coordinate c's row is tabulated (see the module docstring)."""
    theta = np.array(rest_theta, dtype=float)
    if c == 0:
        theta[1] = PLANE_ELEVATION_RAD
    return theta


def contracture_moment(das3, mtg_arrays, theta: np.ndarray, c: int, elements: np.ndarray,
                       contracted: np.ndarray) -> float:
    """dT_c at the MTG coordinates ``theta`` (N m): the module docstring's sum over ``elements`` (indices),
    ``contracted`` their parameter rows with the shortened slack length."""
    L = path_lengths(das3, das3_angles(mtg_arrays, theta))[elements]
    arm = coordinate_arms(das3, mtg_arrays, theta, c)[elements]
    able = das3.arrays.mus[elements]
    extra = [passive_force(Pc, Li) - passive_force(Pa, Li) for Pc, Pa, Li in zip(contracted, able, L)]
    return float(np.dot(arm, extra))


def coordinate_range(das3, c: int) -> tuple[float, float]:
    span = TABLE_RANGES_RAD[c]
    return (float(das3.dof_ranges[6 + c, 0]), float(das3.dof_ranges[6 + c, 1])) if span is None else span


def coordinate_row(das3, mtg_arrays, base: np.ndarray, c: int, elements: np.ndarray,
                   contracted: np.ndarray) -> tuple[float, float, np.ndarray, np.ndarray] | None:
    """Coordinate c's table (first knot, spacing, values, slopes) with the others at ``base``; None where it is zero
    to round-off (no contracted element crosses c)."""
    lo, hi = coordinate_range(das3, c)
    knots = np.linspace(lo, hi, int(math.ceil((hi - lo) / KNOT_STEP_RAD)) + 1)
    value, slope = np.zeros(knots.size), np.zeros(knots.size)
    for k, angle in enumerate(knots):
        at = [base.copy() for _ in range(3)]
        for theta, offset in zip(at, (0.0, SLOPE_STEP_RAD, -SLOPE_STEP_RAD)):
            theta[c] = angle + offset
        v = [contracture_moment(das3, mtg_arrays, theta, c, elements, contracted) for theta in at]
        value[k], slope[k] = v[0], (v[1] - v[2]) / (2.0 * SLOPE_STEP_RAD)
    return (lo, knots[1] - knots[0], value, slope) if np.any(np.abs(value) > 1e-9) else None


def contracture_table(das3, mtg_arrays, rest_theta: np.ndarray, contracture: tuple) -> ContractureTable:
    """The tables of every coordinate some contracted element crosses, for ``contracture`` ((element or group,
    shift in Lceopt) pairs, :class:`sim.das3.config.ModelConfig`) on the DAS3 arm ``das3``."""
    shift = pee_slack_shift(contracture, tuple(das3.muscle_names))
    elements = np.flatnonzero(shift > 0.0)
    if elements.size == 0:
        return no_contracture()
    contracted = das3.arrays.mus[elements].copy()
    contracted[:, MUS_PEESLACK] -= shift[elements]
    rows = [coordinate_row(das3, mtg_arrays, table_posture(rest_theta, c), c, elements, contracted) for c in range(5)]
    n = max((r[2].size for r in rows if r is not None), default=0)
    table = ContractureTable(np.zeros(5), np.ones(5), np.zeros(5, np.int64), np.zeros((5, n)), np.zeros((5, n)))
    for c, row in enumerate(rows):
        if row is not None:
            table.start[c], table.step[c], table.n_knots[c] = row[0], row[1], row[2].size
            table.value[c, :row[2].size], table.slope[c, :row[2].size] = row[2], row[3]
    return table
