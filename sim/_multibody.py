"""Multibody part of the DAS3 residual: f_eom without the muscle moments, with exact derivatives.

Implements (spec "Kinematics", "Multibody", "Passive joint moments", "Conoid ligament",
"Scapulothoracic contact", paper App. B) for the serial chain thorax -> clavicle -> scapula -> humerus ->
ulna -> radius (+ hand):

    Q_j = k_j . sum_{bodies distal to j} [(p_c - o_j) x m (g - a_c) - dH_c/dt]
          + k_j . sum_{point forces distal to j} (P - o_j) x F  + tau_passive_j + external moments,

i.e. Q_applied + tau(q, qdot) - (M(q) qdd + c(q, qdot)) without muscles, evaluated in the thorax (world)
frame with forward-mode dual numbers, so ``Q[j, slot_q(i)]`` is exactly dQ_j/dq_i and ``Q[j, slot_qd(i)]``
is dQ_j/dqdot_i. The mass matrix M (= -dQ/dqdd) is formed separately from the body Jacobians.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from sim._dual import (
    ND,
    d_add,
    d_constmat_vec,
    d_cross,
    d_dot,
    d_iadd,
    d_iadd_scaled,
    d_mattvec,
    d_matvec,
    d_matvec_const,
    d_rotate_frame,
    d_scale,
    d_scale_var,
    d_sqrt,
    d_sub,
    frame_slots,
    rotation_about_axis,
    slot_q,
    slot_qd,
)
from sim._jit import kernel
from sim.engin import engin_torque
from sim.model import CLAVICLE_FRAME, HUMERUS_FRAME, N_DOF, N_FRAMES, RADIUS_FRAME, SCAPULA_FRAME, ULNA_FRAME


class MultibodyWork(NamedTuple):
    """Preallocated workspace of :func:`multibody_eval`. Output fields are overwritten each call."""

    R: np.ndarray      # (12, 3, 3, ND) frame orientations (world), dual
    P: np.ndarray      # (12, 3, ND) frame origins = joint centres, dual
    w: np.ndarray      # (12, 3, ND) angular velocities
    al: np.ndarray     # (12, 3, ND) angular accelerations
    acc: np.ndarray    # (12, 3, ND) origin accelerations
    k: np.ndarray      # (11, 3, ND) DOF axes (world)
    tv: np.ndarray     # (12, 3, ND) scratch vectors
    ts: np.ndarray     # (6, ND) scratch scalars
    conoid_F: np.ndarray  # (3, ND) conoid force on the scapula
    conoid_PO: np.ndarray  # (3, ND)
    conoid_PI: np.ndarray  # (3, ND)
    contact_F: np.ndarray  # (2, 3, ND) contact force on the scapula at TS, AI
    contact_P: np.ndarray  # (2, 3, ND)
    Fsum: np.ndarray   # (3, ND) force accumulator (subtree)
    Mo: np.ndarray     # (3, ND) moment about the world origin accumulator
    Q: np.ndarray      # (11, ND) OUTPUT generalized forces (no muscles) and their derivatives
    M: np.ndarray      # (11, 11) OUTPUT mass matrix
    jac_v: np.ndarray  # (11, 3) scratch
    jac_iw: np.ndarray  # (11, 3) scratch
    rot: np.ndarray    # (3, 3)
    drot: np.ndarray   # (3, 3)
    scratch3: np.ndarray  # (4, 3)
    gh_force_world: np.ndarray  # (3,) OUTPUT sum over humerus..hand of m(g - a) + external forces
    hand_position: np.ndarray   # (3,) OUTPUT hand centre of mass, thorax frame
    engin_dir: np.ndarray  # (2, 3) humerus direction and elbow flexion axis (thorax), when Engin's option is on
    engin_jac: np.ndarray  # (3, 7) OUTPUT Engin's moment on the humerus (column 0), its derivatives w.r.t. u, a


def new_multibody_work() -> MultibodyWork:
    w = MultibodyWork(
        R=np.zeros((N_FRAMES, 3, 3, ND)), P=np.zeros((N_FRAMES, 3, ND)), w=np.zeros((N_FRAMES, 3, ND)),
        al=np.zeros((N_FRAMES, 3, ND)), acc=np.zeros((N_FRAMES, 3, ND)), k=np.zeros((N_DOF, 3, ND)),
        tv=np.zeros((12, 3, ND)), ts=np.zeros((6, ND)), conoid_F=np.zeros((3, ND)),
        conoid_PO=np.zeros((3, ND)), conoid_PI=np.zeros((3, ND)), contact_F=np.zeros((2, 3, ND)),
        contact_P=np.zeros((2, 3, ND)), Fsum=np.zeros((3, ND)), Mo=np.zeros((3, ND)),
        Q=np.zeros((N_DOF, ND)), M=np.zeros((N_DOF, N_DOF)), jac_v=np.zeros((N_DOF, 3)),
        jac_iw=np.zeros((N_DOF, 3)), rot=np.zeros((3, 3)), drot=np.zeros((3, 3)), scratch3=np.zeros((4, 3)),
        gh_force_world=np.zeros(3), hand_position=np.zeros(3), engin_dir=np.zeros((2, 3)),
        engin_jac=np.zeros((3, 7)),
    )
    for i in range(3):
        w.R[0, i, i, 0] = 1.0
    return w


@kernel
def _forward_kinematics(A, q, qd, qdd, W):
    """Positions, velocities and accelerations of all frames (dual). Frame 0 (thorax) is fixed."""
    r, t1, t2, t3, kq = W.tv[0], W.tv[1], W.tv[2], W.tv[3], W.tv[4]
    for j in range(N_DOF):
        f, c = j, j + 1
        n = frame_slots(c)
        d_matvec_const(W.R[f], A.joint_loc[j], r, n)
        d_add(W.P[f], r, W.P[c], n)
        d_matvec_const(W.R[f], A.joint_axis[j], W.k[j], n)
        # acceleration of the new origin (fixed in frame f): a_f + al_f x r + w_f x (w_f x r)
        d_cross(W.al[f], r, t1, n)
        d_cross(W.w[f], r, t2, n)
        d_cross(W.w[f], t2, t3, n)
        d_add(W.acc[f], t1, W.acc[c], n)
        d_iadd(W.acc[c], t3, n)
        # w_c = w_f + k qd ; al_c = al_f + k qdd + w_f x (k qd)
        d_scale_var(W.k[j], qd[j], slot_qd(j), kq, n)
        d_add(W.w[f], kq, W.w[c], n)
        d_cross(W.w[f], kq, t1, n)
        d_add(W.al[f], t1, W.al[c], n)
        d_iadd_scaled(W.al[c], W.k[j], qdd[j], n)
        rotation_about_axis(A.joint_axis[j], q[j], W.rot, W.drot)
        d_rotate_frame(W.R[f], W.rot, W.drot, slot_q(j), W.R[c], n)


@kernel
def _mass_matrix(A, W):
    """M = sum_b m Jv^T Jv + Jw^T I_w Jw with Jv_j = k_j x (p_b - o_j), Jw_j = k_j (values only)."""
    M = W.M
    M[:, :] = 0.0
    for b in range(A.body_mass.shape[0]):
        f = A.body_frame[b]
        Rb = W.R[f, :, :, 0]
        pb = W.scratch3[0]
        for i in range(3):
            pb[i] = W.P[f, i, 0] + Rb[i, 0] * A.body_com[b, 0] + Rb[i, 1] * A.body_com[b, 1] \
                + Rb[i, 2] * A.body_com[b, 2]
        m = A.body_mass[b]
        I = A.body_inertia[b]  # noqa: E741 (the inertia tensor, named as in the equations)
        for j in range(f):
            kx, ky, kz = W.k[j, 0, 0], W.k[j, 1, 0], W.k[j, 2, 0]
            dx = pb[0] - W.P[j + 1, 0, 0]
            dy = pb[1] - W.P[j + 1, 1, 0]
            dz = pb[2] - W.P[j + 1, 2, 0]
            W.jac_v[j, 0] = ky * dz - kz * dy
            W.jac_v[j, 1] = kz * dx - kx * dz
            W.jac_v[j, 2] = kx * dy - ky * dx
            # I_w k = R I R^T k
            l0 = Rb[0, 0] * kx + Rb[1, 0] * ky + Rb[2, 0] * kz
            l1 = Rb[0, 1] * kx + Rb[1, 1] * ky + Rb[2, 1] * kz
            l2 = Rb[0, 2] * kx + Rb[1, 2] * ky + Rb[2, 2] * kz
            i0 = I[0, 0] * l0 + I[0, 1] * l1 + I[0, 2] * l2
            i1 = I[1, 0] * l0 + I[1, 1] * l1 + I[1, 2] * l2
            i2 = I[2, 0] * l0 + I[2, 1] * l1 + I[2, 2] * l2
            W.jac_iw[j, 0] = Rb[0, 0] * i0 + Rb[0, 1] * i1 + Rb[0, 2] * i2
            W.jac_iw[j, 1] = Rb[1, 0] * i0 + Rb[1, 1] * i1 + Rb[1, 2] * i2
            W.jac_iw[j, 2] = Rb[2, 0] * i0 + Rb[2, 1] * i1 + Rb[2, 2] * i2
        for i in range(f):
            for j in range(i + 1):
                v = m * (W.jac_v[i, 0] * W.jac_v[j, 0] + W.jac_v[i, 1] * W.jac_v[j, 1]
                         + W.jac_v[i, 2] * W.jac_v[j, 2])
                v += W.k[i, 0, 0] * W.jac_iw[j, 0] + W.k[i, 1, 0] * W.jac_iw[j, 1] \
                    + W.k[i, 2, 0] * W.jac_iw[j, 2]
                M[i, j] += v
                if i != j:
                    M[j, i] += v


@kernel
def _body_wrench(A, b, W):
    """Add body b's gravity-minus-inertia wrench, m(g - a) and -dH/dt, to the accumulators."""
    f = A.body_frame[b]
    n = frame_slots(f)
    cw, p, t1, t2, t3, ab = W.tv[0], W.tv[1], W.tv[2], W.tv[3], W.tv[4], W.tv[5]
    F, wl, all_, Iw, hd = W.tv[6], W.tv[7], W.tv[8], W.tv[9], W.tv[10]
    d_matvec_const(W.R[f], A.body_com[b], cw, n)
    d_add(W.P[f], cw, p, n)
    d_cross(W.al[f], cw, t1, n)
    d_cross(W.w[f], cw, t2, n)
    d_cross(W.w[f], t2, t3, n)
    d_add(W.acc[f], t1, ab, n)
    d_iadd(ab, t3, n)
    m = A.body_mass[b]
    for i in range(3):
        for k in range(n):
            F[i, k] = -m * ab[i, k]
        F[i, 0] += m * A.body_weight[b] * A.gravity[i]
    # dH/dt = R (I al_l + w_l x I w_l), with w_l = R^T w, al_l = R^T al (body frame)
    d_mattvec(W.R[f], W.w[f], wl, n)
    d_mattvec(W.R[f], W.al[f], all_, n)
    d_constmat_vec(A.body_inertia[b], wl, Iw, n)
    d_cross(wl, Iw, t1, n)
    d_constmat_vec(A.body_inertia[b], all_, t2, n)
    d_iadd(t2, t1, n)
    d_matvec(W.R[f], t2, hd, n)
    d_iadd(W.Fsum, F, n)
    d_cross(p, F, t3, n)
    d_iadd(W.Mo, t3, n)
    d_iadd_scaled(W.Mo, hd, -1.0, n)


@kernel
def _point_force(P, F, W, n):
    """Accumulate a force F (dual) applied at point P (dual)."""
    t = W.tv[11]
    d_iadd(W.Fsum, F, n)
    d_cross(P, F, t, n)
    d_iadd(W.Mo, t, n)


@kernel
def _const_force_at(frame, local_point, force, W):
    """A constant world force applied at a point fixed in ``frame``."""
    n = frame_slots(frame)
    cw, p, F = W.tv[0], W.tv[1], W.tv[2]
    d_matvec_const(W.R[frame], local_point, cw, n)
    d_add(W.P[frame], cw, p, n)
    F[:, :] = 0.0
    for i in range(3):
        F[i, 0] = force[i]
    _point_force(p, F, W, n)


@kernel
def _ligament_and_contact(A, W):
    """Conoid ligament (spec "Conoid ligament") and scapulothoracic contact (paper App. B), dual."""
    con = A.conoid
    n = frame_slots(SCAPULA_FRAME)
    t0, t1 = W.tv[0], W.tv[1]
    s0, s1, s2 = W.ts[0], W.ts[1], W.ts[2]
    d_matvec_const(W.R[CLAVICLE_FRAME], con[0:3], t0, n)
    d_add(W.P[CLAVICLE_FRAME], t0, W.conoid_PO, n)
    d_matvec_const(W.R[SCAPULA_FRAME], con[3:6], t0, n)
    d_add(W.P[SCAPULA_FRAME], t0, W.conoid_PI, n)
    d_sub(W.conoid_PI, W.conoid_PO, t1, n)            # d = P_I - P_O
    d_dot(t1, t1, s0, n)
    d_sqrt(s0, s1, n)                                  # |d|
    length, stiffness, eps = con[6], con[7], con[8]
    stretch = s1[0] - length
    root = math.sqrt(stretch * stretch + eps * eps)
    pos = 0.5 * (stretch + root)
    dpos = 0.5 * (1.0 + stretch / root)
    # factor = -k * pos / |d|
    fac = -stiffness * pos / s1[0]
    dfac_dlen = -stiffness * (dpos * s1[0] - pos) / (s1[0] * s1[0])
    s2[0] = fac
    for k in range(1, n):
        s2[k] = dfac_dlen * s1[k]
    d_scale(t1, s2, W.conoid_F, n)

    ct = A.contact
    asum = ct[3] * ct[3] + ct[4] * ct[4] + ct[5] * ct[5]
    kc, eps_c = ct[6], ct[7]
    for pt in range(2):
        rel = W.tv[2]
        d_matvec_const(W.R[SCAPULA_FRAME], A.contact_points[pt], t0, n)
        d_add(W.P[SCAPULA_FRAME], t0, W.contact_P[pt], n)
        for i in range(3):
            for k in range(n):
                rel[i, k] = W.contact_P[pt, i, k]
            rel[i, 0] -= ct[i]
        # E = sum (rel_i / a_i)^2 - 1 ; Em = (E - sqrt(E^2 + eps^2)) / 2
        for k in range(n):
            s0[k] = 0.0
        for i in range(3):
            inv2 = 1.0 / (ct[3 + i] * ct[3 + i])
            for k in range(1, n):
                s0[k] += 2.0 * rel[i, 0] * rel[i, k] * inv2
            s0[0] += rel[i, 0] * rel[i, 0] * inv2
        E = s0[0] - 1.0
        rootE = math.sqrt(E * E + eps_c * eps_c)
        Em = 0.5 * (E - rootE)
        dEm = 0.5 * (1.0 - E / rootE)
        for i in range(3):
            g = -kc * asum / (ct[3 + i] * ct[3 + i])
            for k in range(1, n):
                W.contact_F[pt, i, k] = g * (rel[i, k] * Em + rel[i, 0] * dEm * s0[k])
            W.contact_F[pt, i, 0] = g * rel[i, 0] * Em


@kernel
def _thoracohumeral_torque(A, loads, W, T):
    """T = M1 e_y + M2 z' + M3 y_h: moments about the thorax Y, floating Z (= e_y x y_h normalised) and
    humeral Y axes (YZY thoracohumeral decomposition), applied to the humerus, reaction on the thorax."""
    n = frame_slots(HUMERUS_FRAME)
    T[:, :] = 0.0
    hy = W.tv[3]
    for i in range(3):
        for k in range(n):
            hy[i, k] = W.R[HUMERUS_FRAME, i, 1, k]
    nv, s0, s1 = W.tv[4], W.ts[3], W.ts[4]
    nv[:, :] = 0.0
    for k in range(n):
        nv[0, k] = hy[2, k]
        nv[2, k] = -hy[0, k]
    d_dot(nv, nv, s0, n)
    s0[0] += 1e-24  # keeps the floating axis finite when the arm is exactly along the thorax Y axis
    d_sqrt(s0, s1, n)
    inv = 1.0 / s1[0]
    for k in range(1, n):
        s1[k] = -s1[k] * inv * inv
    s1[0] = inv
    zf = W.tv[5]
    d_scale(nv, s1, zf, n)
    T[1, 0] += loads[0]
    d_iadd_scaled(T, zf, loads[1], n)
    d_iadd_scaled(T, hy, loads[2], n)


@kernel
def multibody_eval(A, q, qd, qdd, loads, W):
    """Fill W.Q (generalized forces without muscles, dual) and W.M (mass matrix) at (q, qd, qdd).

    loads = (M_th_y, M_th_z, M_hum_y, M_elbow, M_pronation, armsupport_distance, armsupport_force,
    hand_force_xyz): see ``sim.model.LOAD_NAMES``. Output fields are overwritten.
    """
    _forward_kinematics(A, q, qd, qdd, W)
    _mass_matrix(A, W)
    _ligament_and_contact(A, W)
    W.Fsum[:, :] = 0.0
    W.Mo[:, :] = 0.0
    nb = A.body_mass.shape[0]
    for c in range(N_FRAMES - 1, 0, -1):
        for b in range(nb):
            if A.body_frame[b] == c:
                _body_wrench(A, b, W)
        if c == RADIUS_FRAME:
            if loads[7] != 0.0 or loads[8] != 0.0 or loads[9] != 0.0:
                _const_force_at(RADIUS_FRAME, A.hand_com_radius, loads[7:10], W)
        elif c == ULNA_FRAME:
            if loads[6] != 0.0:
                pt, fo = W.scratch3[1], W.scratch3[2]
                pt[0], pt[1], pt[2] = 0.0, -loads[5], 0.0   # on the ulna's -y axis, below the elbow
                fo[0], fo[1], fo[2] = 0.0, loads[6], 0.0    # vertical (thorax +Y = upward)
                _const_force_at(ULNA_FRAME, pt, fo, W)
        elif c == HUMERUS_FRAME:
            for i in range(3):
                W.gh_force_world[i] = W.Fsum[i, 0]
            if loads[0] != 0.0 or loads[1] != 0.0 or loads[2] != 0.0:
                T = W.tv[6]
                _thoracohumeral_torque(A, loads, W, T)
                d_iadd(W.Mo, T, frame_slots(HUMERUS_FRAME))
            if A.engin[0] != 0.0:   # Engin's passive moment: on the humerus, reaction on the thorax
                T = W.tv[6]
                engin_torque(A.engin, W.R[HUMERUS_FRAME], frame_slots(HUMERUS_FRAME), W.engin_dir, W.engin_jac, T)
                d_iadd(W.Mo, T, frame_slots(HUMERUS_FRAME))
        elif c == SCAPULA_FRAME:
            n = frame_slots(SCAPULA_FRAME)
            _point_force(W.conoid_PI, W.conoid_F, W, n)
            for pt in range(2):
                _point_force(W.contact_P[pt], W.contact_F[pt], W, n)
        elif c == CLAVICLE_FRAME:
            n = frame_slots(SCAPULA_FRAME)  # the conoid force depends on clavicle and scapula DOFs
            negF = W.tv[7]
            for i in range(3):
                for k in range(n):
                    negF[i, k] = -W.conoid_F[i, k]
            _point_force(W.conoid_PO, negF, W, n)
        # Q_j = k_j . (Mo - o_j x Fsum), o_j = P[c], j = c - 1
        t0, t1 = W.tv[8], W.tv[9]
        d_cross(W.P[c], W.Fsum, t0, ND)
        d_sub(W.Mo, t0, t1, ND)
        d_dot(W.k[c - 1], t1, W.Q[c - 1], ND)
    W.Q[9, 0] += loads[3]
    W.Q[10, 0] += loads[4]
    # passive joint moments (spec): -K1 (q - mid) - B qd + K2 (lo - q)^2 [q < lo] - K2 (q - hi)^2 [q > hi]
    k1, k2, damping = A.joint_k[0], A.joint_k[1], A.joint_k[2]
    for j in range(N_DOF):
        tau = -k1 * (q[j] - A.joint_mid[j]) - damping * qd[j]
        dtau = -k1
        if q[j] < A.joint_lo[j]:
            e = A.joint_lo[j] - q[j]
            tau += k2 * e * e
            dtau -= 2.0 * k2 * e
        elif q[j] > A.joint_hi[j]:
            e = q[j] - A.joint_hi[j]
            tau -= k2 * e * e
            dtau -= 2.0 * k2 * e
        W.Q[j, 0] += tau
        W.Q[j, slot_q(j)] += dtau
        W.Q[j, slot_qd(j)] -= damping
    # hand centre position (values)
    for i in range(3):
        W.hand_position[i] = W.P[RADIUS_FRAME, i, 0] + W.R[RADIUS_FRAME, i, 0, 0] * A.hand_com_radius[0] \
            + W.R[RADIUS_FRAME, i, 1, 0] * A.hand_com_radius[1] + W.R[RADIUS_FRAME, i, 2, 0] * A.hand_com_radius[2]
