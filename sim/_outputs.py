"""Outputs of an evaluated state (das3-model.md "Outputs"): thoracohumeral angles, hand position, contact and
conoid forces, and the GH joint reaction force with its stability measure (Chadwick et al. 2014 eq. 9)."""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from sim._jit import kernel, vector_kernel
from sim._muscles import chunk_sums
from sim.model import HUMERUS_FRAME, SCAPULA_FRAME


class OutputWork(NamedTuple):
    th_angles: np.ndarray     # (3,) plane of elevation, elevation, axial rotation (rad)
    gh_force: np.ndarray      # (3,) N, on the scapula, scapula frame
    gh_angles: np.ndarray     # (2,) theta (superior-inferior), phi (anterior-posterior), rad
    gh_stability: np.ndarray  # (1,)
    contact_force: np.ndarray  # (2, 3) N on the scapula at TS, AI, thorax frame
    hand_position: np.ndarray  # (3,) m, thorax frame
    conoid_force: np.ndarray   # (3,) N on the scapula, thorax frame
    loa: np.ndarray            # (67 * 3,) scratch: the GH line-of-action fits, row 3 k + c
    dense_mono: np.ndarray     # (NC,) scratch: monomials gathered for the dense line-of-action groups


def new_output_work(A) -> OutputWork:
    return OutputWork(
        th_angles=np.zeros(3), gh_force=np.zeros(3), gh_angles=np.zeros(2), gh_stability=np.zeros(1),
        contact_force=np.zeros((2, 3)), hand_position=np.zeros(3), conoid_force=np.zeros(3),
        loa=np.zeros(3 * A.gh_muscle.shape[0]), dense_mono=np.zeros(A.loa_dense_mono.shape[0]),
    )


@vector_kernel
def dense_dot(a, b):
    """sum_i a_i b_i, vectorised (see :data:`sim._jit.vector_kernel`)."""
    acc = 0.0
    for i in range(a.shape[0]):
        acc += a[i] * b[i]
    return acc


@kernel
def _lines_of_action(A, mono, out):
    """out.loa[3 k + c]: component c of GH line-of-action fit k (dense groups as dot products over the
    monomials each group uses, the other fits as chunk sums)."""
    loa = out.loa
    loa[:] = 0.0
    chunk_sums(A.loa_target, A.loa_coef, A.loa_mono, mono, loa)
    for j in range(A.loa_dense_mono.shape[0]):
        out.dense_mono[j] = mono[A.loa_dense_mono[j]]
    for r in range(loa.shape[0]):
        g = A.loa_dense_group[r]
        if g >= 0:
            c0, c1 = A.loa_group_cols[g], A.loa_group_cols[g + 1]
            off = A.loa_dense_off[r]
            loa[r] = dense_dot(A.loa_dense_coef[off:off + c1 - c0], out.dense_mono[c0:c1])


@kernel
def compute_outputs(A, W):
    """Outputs of the state of the last :func:`evaluate` (spec "Outputs")."""
    mb, mu, out = W.mb, W.mu, W.out
    R = mb.R[HUMERUS_FRAME, :, :, 0]
    # thoracohumeral YZY angles of R = R_thorax->humerus
    out.th_angles[0] = math.atan2(R[2, 1], -R[0, 1])
    out.th_angles[1] = math.acos(min(1.0, max(-1.0, R[1, 1])))
    out.th_angles[2] = math.atan2(R[1, 2], R[1, 0])
    for i in range(3):
        out.hand_position[i] = mb.hand_position[i]
        out.conoid_force[i] = mb.conoid_F[i, 0]
        for n in range(2):
            out.contact_force[n, i] = mb.contact_F[n, i, 0]
    # GH force on the scapula, scapula frame: R6^T (sum m(g - a) + external) + sum_i F_i d_i
    S = mb.R[SCAPULA_FRAME, :, :, 0]
    gw = mb.gh_force_world
    for i in range(3):
        out.gh_force[i] = S[0, i] * gw[0] + S[1, i] * gw[1] + S[2, i] * gw[2]
    _lines_of_action(A, mu.mono, out)
    loa = out.loa
    for k in range(A.gh_muscle.shape[0]):
        lx, ly, lz = loa[3 * k], loa[3 * k + 1], loa[3 * k + 2]
        norm = math.sqrt(lx * lx + ly * ly + lz * lz)
        if norm > 0.0:
            F = mu.force[A.gh_muscle[k]] / norm
            out.gh_force[0] += F * lx
            out.gh_force[1] += F * ly
            out.gh_force[2] += F * lz
    # GH stability (paper eq. 9; spec "Outputs")
    G = A.glenoid
    fx = G[0, 0] * out.gh_force[0] + G[0, 1] * out.gh_force[1] + G[0, 2] * out.gh_force[2]
    fy = G[1, 0] * out.gh_force[0] + G[1, 1] * out.gh_force[1] + G[1, 2] * out.gh_force[2]
    fz = G[2, 0] * out.gh_force[0] + G[2, 1] * out.gh_force[1] + G[2, 2] * out.gh_force[2]
    theta = math.atan2(fy, fx)
    phi = math.atan2(fz, fx)
    if fx <= 0.0 and fy == 0.0 and fz == 0.0:
        theta = math.pi  # no direction: treat as pointing away from the fossa
    out.gh_angles[0] = theta
    out.gh_angles[1] = phi
    out.gh_stability[0] = (theta / A.gh_rim[0]) ** 2 + (phi / A.gh_rim[1]) ** 2 - 1.0
