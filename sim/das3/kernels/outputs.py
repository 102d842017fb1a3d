"""Outputs of an evaluated state (das3-model.md "Outputs"): thoracohumeral angles, hand position, contact and
conoid forces, and the GH joint reaction force with its stability measure (Chadwick et al. 2014 eq. 9)."""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from sim.das3.layout import HUMERUS_FRAME, SCAPULA_FRAME
from sim.jit.kernel import kernel


class OutputWork(NamedTuple):
    th_angles: np.ndarray     # (3,) plane of elevation, elevation, axial rotation (rad)
    gh_force: np.ndarray      # (3,) N, on the scapula, scapula frame
    gh_angles: np.ndarray     # (2,) theta (superior-inferior), phi (anterior-posterior), rad
    gh_stability: np.ndarray  # (1,)
    contact_force: np.ndarray  # (2, 3) N on the scapula at TS, AI, thorax frame
    hand_position: np.ndarray  # (3,) m, thorax frame
    conoid_force: np.ndarray   # (3,) N on the scapula, thorax frame
    loa: np.ndarray            # (67 * 3,) scratch: the GH line-of-action fits, row 3 k + c


def new_output_work(A) -> OutputWork:
    return OutputWork(
        th_angles=np.zeros(3), gh_force=np.zeros(3), gh_angles=np.zeros(2), gh_stability=np.zeros(1),
        contact_force=np.zeros((2, 3)), hand_position=np.zeros(3), conoid_force=np.zeros(3),
        loa=np.zeros(3 * A.gh_muscle.shape[0]),
    )


@kernel
def add_columns(coef, mono, cols, rows):
    """rows_r = sum_j coef[j, r] mono[cols_j] for a column-major block (``coef`` flat, rows.shape[0] rows): eight
    columns at a time as the fixed tree ((c0 m0 + c1 m1) + (c2 m2 + c3 m3)) + ((c4 m4 + c5 m5) + (c6 m6 +
    c7 m7)), then the rest one by one. The loop over rows is what vectorises, so every CPU sums in this
    order and gives the same bits."""
    n_rows = rows.shape[0]
    for r in range(n_rows):
        rows[r] = 0.0
    n_cols = cols.shape[0]
    block = coef.reshape((n_cols, n_rows))
    whole = n_cols - n_cols % 8
    for j in range(0, whole, 8):
        m0, m1, m2, m3 = mono[cols[j]], mono[cols[j + 1]], mono[cols[j + 2]], mono[cols[j + 3]]
        m4, m5, m6, m7 = mono[cols[j + 4]], mono[cols[j + 5]], mono[cols[j + 6]], mono[cols[j + 7]]
        for r in range(n_rows):
            rows[r] += ((block[j, r] * m0 + block[j + 1, r] * m1) + (block[j + 2, r] * m2 + block[j + 3, r] * m3)) + (
                (block[j + 4, r] * m4 + block[j + 5, r] * m5) + (block[j + 6, r] * m6 + block[j + 7, r] * m7))
    for j in range(whole, n_cols):
        for r in range(n_rows):
            rows[r] += block[j, r] * mono[cols[j]]


@kernel
def _lines_of_action(A, mono, out):
    """out.loa[3 k + c]: component c of GH line-of-action fit k, each group of fits column by column over the
    monomials it uses."""
    for g in range(A.loa_group_cols.shape[0] - 1):
        add_columns(A.loa_dense_coef[A.loa_group_coef[g]:A.loa_group_coef[g + 1]], mono,
                    A.loa_dense_mono[A.loa_group_cols[g]:A.loa_group_cols[g + 1]],
                    out.loa[A.loa_group_rows[g]:A.loa_group_rows[g + 1]])


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
