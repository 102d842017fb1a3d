"""A virtual patient on the reduced MTG arm: each MTG scaled by the DAS3 muscle elements behind it.

The MTG arm has ten actuators, not muscle groups, so a patient (:mod:`sim.patient`: per-group strength,
denervation, voluntary control) reaches an MTG through the elements that act in its direction. Element i's
capacity for MTG m (coordinate c, direction d) is its share of the moment the able-bodied arm can exert in that
direction, with its moment arm averaged over :data:`REFERENCE_POSTURES_DEG`:

    w_im = Fmax_i * max(0, -d * mean over postures of dL_i/dtheta_c)

(-dL_i/dtheta_c: the moment arm about the MTG's coordinate, path lengths from the DAS3 polynomials with the
clavicle and scapula frozen as in the MTG arm). With s_i the element's Fmax factor ([model] strength times the
patient's), g_i = 0 for a denervated element (else 1) and v_i = 1 where its group is voluntary:

    strength_m = sum_i w_im s_i / sum_i w_im        (the MTG's tau_max factor: active and passive torque, as Fmax
                                                     scales a muscle's active, passive and tendon force)
    gate_m     = sum_i w_im s_i g_i / sum_i w_im s_i   (the excitation gate: the innervated share of what is left)
    reach_m    = sum_i w_im s_i v_i / sum_i w_im s_i g_i   (the patient's own drive, on top of the gate)

so that at full excitation the MTG exerts strength_m gate_m of its tau_max, and the patient's own drive reaches
its voluntary share of it. A spastic innervated element i (:mod:`sim.das3.kernels.reflex`: e_i = G_i max(0,
v_i(t - tau_i) - v_th,i), v_i its lengthening velocity in Lceopt/s) adds its reflex to each MTG m it acts
through, weighted by its share of the MTG's capacity, with v_i taken from the coordinate's velocity alone:

    u_m <- min(1, u_m + sum_i share_im G_i max(0, (rho_im / Lceopt_i) (-d qdot_c)(t - tau_i) - v_th,i)),
    share_im = w_im s_i / sum_j w_jm s_j,  rho_im = w_im / Fmax_i (its moment arm in the MTG's direction)

(-d qdot_c > 0: the coordinate turning against the MTG, lengthening its muscles). The weighting is this project's
*proposal* (no source reduces a patient to joint actuators); it is exact for an element-uniform strength.
Muscles that do not cross the GH joint (trapezius, serratus, rhomboids, levator, pectoralis minor) have no moment
arm about the shoulder coordinates with the girdle frozen, so their loss does not weaken the MTG shoulder,
although on the DAS3 arm it does through the scapula.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from sim.das3.kernels.muscles import muscle_paths, new_muscle_work
from sim.das3.layout import MUS_FMAX, MUS_LCEOPT
from sim.das3.model import excitation_gate, fmax_scale, reflex_parameters
from sim.mtg.arm import humerus_rotation

REFERENCE_POSTURES_DEG = tuple((30.0, elevation, 0.0, 90.0, 90.0) for elevation in (30.0, 60.0, 90.0, 120.0))
"""MTG coordinates (plane of elevation, elevation, axial rotation, elbow flexion, pronation; deg) the capacities
are averaged over: the scapular plane (30 deg) through the elevation range of the MTG data, elbow at 90 deg,
forearm neutral (90 deg, as the horizontal tasks of ``sim/data/mtg_source``). *Proposal.*"""
STEP_RAD = 1e-6
"""Central-difference step of dL/dtheta (the lengths are polynomials: the error is O(step^2))."""


class ActuatorPatient(NamedTuple):
    """Per MTG: tau_max factor, excitation gate and the patient's own drive's reach (module docstring)."""

    strength: np.ndarray
    gate: np.ndarray
    reach: np.ndarray


def able_bodied(n_mtg: int) -> ActuatorPatient:
    """Every factor exactly 1: the published MTG arm, bit for bit."""
    return ActuatorPatient(np.ones(n_mtg), np.ones(n_mtg), np.ones(n_mtg))


def das3_angles(mtg_arrays, theta) -> np.ndarray:
    """(11,) DAS3 DOFs of the MTG coordinates ``theta`` (5, rad): the frozen girdle, the GH YZY angles of
    R_scapula^T R_humerus (as :func:`sim.mtg.step.mtg_outputs`), the elbow and pronation."""
    R = np.zeros((3, 3))
    humerus_rotation(theta[0], theta[1], theta[2], R)
    G = mtg_arrays.scapula_R.T @ R
    q = np.zeros(11)
    q[:6] = mtg_arrays.girdle_q
    q[6] = math.atan2(G[2, 1], -G[0, 1])
    q[7] = math.acos(min(1.0, max(-1.0, G[1, 1])))
    q[8] = math.atan2(G[1, 2], G[1, 0])
    q[9], q[10] = theta[3], theta[4]
    return q


def path_lengths(das3, q: np.ndarray) -> np.ndarray:
    """(n_elements,) muscle-tendon lengths at the DAS3 angles q (m)."""
    A = das3.arrays
    work = new_muscle_work(A.mono_parent.shape[0], A.hess_entry.shape[0])
    muscle_paths(A, np.ascontiguousarray(q), work)
    return work.L.copy()


def coordinate_arms(das3, mtg_arrays, theta, c: int) -> np.ndarray:
    """(n_elements,) -dL_i/dtheta_c at the MTG coordinates ``theta``, m/rad (central differences)."""
    up, down = np.array(theta, dtype=float), np.array(theta, dtype=float)
    up[c] += STEP_RAD
    down[c] -= STEP_RAD
    return -(path_lengths(das3, das3_angles(mtg_arrays, up))
             - path_lengths(das3, das3_angles(mtg_arrays, down))) / (2.0 * STEP_RAD)


def moment_arms(das3, mtg_arrays, theta) -> np.ndarray:
    """(n_elements, 5) -dL_i/dtheta_c at the MTG coordinates ``theta``, m/rad: :func:`coordinate_arms` of each."""
    return np.column_stack([coordinate_arms(das3, mtg_arrays, theta, c) for c in range(5)])


def direction_arms(das3, mtg_arrays) -> np.ndarray:
    """(n_mtg, n_elements) rho_im = max(0, -d * mean over :data:`REFERENCE_POSTURES_DEG` of dL_i/dtheta_c), m/rad:
    element i's mean moment arm in MTG m's direction (0 where on average it turns the coordinate the other way)."""
    postures = np.radians(np.array(REFERENCE_POSTURES_DEG))
    arms = np.mean([moment_arms(das3, mtg_arrays, theta) for theta in postures], axis=0)
    rho = np.zeros((mtg_arrays.mtg_coord.shape[0], arms.shape[0]))
    for m, (c, d) in enumerate(zip(mtg_arrays.mtg_coord, mtg_arrays.mtg_dir)):
        rho[m] = np.maximum(0.0, d * arms[:, c])
    return rho


def capacity_weights(das3, mtg_arrays, fmax_able: np.ndarray) -> np.ndarray:
    """(n_mtg, n_elements) w_im = Fmax_i rho_im of the module docstring (N m/rad)."""
    return fmax_able * direction_arms(das3, mtg_arrays)


def actuator_patient(weights: np.ndarray, scale: np.ndarray, innervated: np.ndarray,
                     voluntary: np.ndarray) -> ActuatorPatient:
    """The MTG factors of the module docstring from the capacities ``weights`` and the elements' Fmax factors,
    innervation (bool) and voluntary control (bool). An MTG with no innervated capacity left has gate 0 and
    reach 0."""
    capacity = weights * scale
    total, left = weights.sum(axis=1), capacity.sum(axis=1)
    innervated_left = (capacity * innervated).sum(axis=1)
    voluntary_left = (capacity * (voluntary & innervated)).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        gate = np.where(left > 0.0, innervated_left / left, 0.0)
        reach = np.where(innervated_left > 0.0, voluntary_left / innervated_left, 0.0)
    return ActuatorPatient(left / total, gate, reach)


class ActuatorReflex(NamedTuple):
    """The spastic elements' stretch reflexes on the MTGs (module docstring), a row per (element, MTG) pair it
    acts through: the element, the MTG, the element's share of the MTG's capacity, its lengthening rate per unit
    stretch of the coordinate (Lceopt/s per rad/s), its gain, threshold (Lceopt/s) and delay (s)."""

    element: np.ndarray
    mtg: np.ndarray
    share: np.ndarray
    rate: np.ndarray
    gain: np.ndarray
    threshold: np.ndarray
    delay_s: np.ndarray


def no_reflex() -> ActuatorReflex:
    return ActuatorReflex(np.zeros(0, np.int64), np.zeros(0, np.int64), *(np.zeros(0) for _ in range(5)))


def actuator_reflex(rho: np.ndarray, capacity: np.ndarray, lceopt: np.ndarray, innervated: np.ndarray,
                    reflex: np.ndarray) -> ActuatorReflex:
    """The rows of :class:`ActuatorReflex` from the direction arms ``rho``, the patient's capacities ``capacity``
    (w_im s_i), the elements' Lceopt, innervation and (gain, threshold, delay) rows ``reflex`` (gain 0: none)."""
    acts = (capacity > 0.0) & ((reflex[:, 0] > 0.0) & innervated)[None, :]
    m, i = np.nonzero(acts)
    share = capacity[m, i] / capacity.sum(axis=1)[m]
    return ActuatorReflex(i.astype(np.int64), m.astype(np.int64), share, rho[m, i] / lceopt[i], reflex[i, 0].copy(),
                          reflex[i, 1].copy(), reflex[i, 2].copy())


def patient_actuators(das3, mtg_arrays, model_config, patient) -> tuple[ActuatorPatient, ActuatorReflex]:
    """The MTG factors and reflexes for the elements' Fmax factors (``model_config.strength``: [model] strength
    times the patient's), denervated elements (``model_config.denervated``) and stretch reflexes
    (``model_config.spasticity``) of a :class:`sim.das3.config.ModelConfig` with the patient applied
    (:func:`sim.patient.apply_patient`), and ``patient``'s voluntary groups; the capacities from ``das3``, the DAS3
    arm the MTG arm is built on (published strength). :func:`able_bodied` and :func:`no_reflex` where nothing
    changes the arm."""
    n_mtg = mtg_arrays.mtg_coord.shape[0]
    names = tuple(das3.muscle_names)
    scale = fmax_scale(model_config.strength, names)
    innervated = excitation_gate(model_config.denervated, names) > 0.0
    voluntary = das3.voluntary_reach(patient) > 0.0
    reflex = reflex_parameters(model_config.spasticity, names)
    if np.all(scale == 1.0) and innervated.all() and voluntary.all() and not reflex[:, 0].any():
        return able_bodied(n_mtg), no_reflex()
    rho = direction_arms(das3, mtg_arrays)
    weights = das3.arrays.mus[:, MUS_FMAX] * rho
    return (actuator_patient(weights, scale, innervated, voluntary),
            actuator_reflex(rho, weights * scale, das3.arrays.mus[:, MUS_LCEOPT], innervated, reflex))
