"""Multibody part of the DAS3 residual: f_eom without the muscle moments, with exact derivatives.

Implements (spec "Kinematics", "Multibody", "Passive joint moments", "Conoid ligament",
"Scapulothoracic contact", paper App. B) for the serial chain thorax -> clavicle -> scapula -> humerus ->
ulna -> radius (+ hand):

    Q_j = k_j . sum_{bodies distal to j} [(p_c - o_j) x m (g - a_c) - dH_c/dt]
          + k_j . sum_{point forces distal to j} (P - o_j) x F  + tau_passive_j + external moments,

i.e. Q_applied + tau(q, qdot) - (M(q) qdd + c(q, qdot)) without muscles, evaluated in the thorax (world)
frame. Derivatives with respect to q are forward-mode dual numbers (``sim.das3.kernels.dual``): ``Q[j, slot_q(i)]`` is
exactly dQ_j/dq_i. Derivatives with respect to qdot (``Av``) are analytic: only the bodies' m(g - a) and
-dH/dt and the joint damping depend on qdot. Perturbing qdot_i changes, for every frame c distal to joint i,
omega_c by k_i and the motion of frame i + 1 (the joint's child) by

    d omega_{i+1} = k_i,   d alpha_{i+1} = omega_i x k_i,   d a(o_i) = 0,

while the motion relative to frame i + 1 is unchanged. With the Coriolis theorem, a_p = A_{i+1}(p) +
2 omega_{i+1} x v_rel + a_rel (v_rel, a_rel relative to frame i + 1, d = p - o_i), a body's centre of mass p
in frame c and its angular motion change by

    d a_p = (omega_i x k_i) x d + k_i x (omega_{i+1} x d) + omega_{i+1} x (k_i x d) + 2 k_i x v_rel,
    d alpha_c = omega_i x k_i + k_i x (omega_c - omega_{i+1}),   d omega_c = k_i,
    d (dH/dt) = I_w d alpha_c + k_i x I_w omega_c + omega_c x I_w k_i        (I_w = R I R^T).

The mass matrix M (= -dQ/dqdd) is formed from the same body Jacobians.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from sim.das3.engin import engin_torque
from sim.das3.kernels.dual import (
    ND,
    add3,
    cross3,
    cross_tangent,
    d_add,
    d_cross,
    d_dot,
    d_iadd,
    d_iadd_scaled,
    d_matvec_const,
    d_scale,
    d_sqrt,
    d_sub,
    frame_slots,
    matvec3,
    put3,
    rot_slot,
    rot_t_tangent,
    rot_t_value,
    rot_tangent,
    rotation_about_axis,
    scaled3,
    slot3,
    slot_q,
    vec3,
)
from sim.das3.layout import CLAVICLE_FRAME, HUMERUS_FRAME, N_DOF, N_FRAMES, RADIUS_FRAME, SCAPULA_FRAME, ULNA_FRAME
from sim.jit.kernel import kernel


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
    Q: np.ndarray      # (11, ND) OUTPUT generalized forces (no muscles) and their q-derivatives
    M: np.ndarray      # (11, 11) OUTPUT mass matrix
    Av: np.ndarray     # (11, 11) OUTPUT dQ/dqdot
    vel: np.ndarray    # (12, 3) frame origin velocities (values)
    jac_v: np.ndarray  # (11, 3) scratch: k_j x (p_b - o_j) of one body
    jac_iw: np.ndarray  # (11, 3) scratch: I_w k_j of one body
    inertia_w: np.ndarray  # (3, 3) scratch: I_w = R I R^T of one body
    dF: np.ndarray     # (11, 3) scratch: d(m (g - a_p))/dqdot_i of one body
    dT: np.ndarray     # (11, 3) scratch: d(-dH/dt)/dqdot_i of one body
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
        Q=np.zeros((N_DOF, ND)), M=np.zeros((N_DOF, N_DOF)), Av=np.zeros((N_DOF, N_DOF)),
        vel=np.zeros((N_FRAMES, 3)), jac_v=np.zeros((N_DOF, 3)), jac_iw=np.zeros((N_DOF, 3)),
        inertia_w=np.zeros((3, 3)), dF=np.zeros((N_DOF, 3)), dT=np.zeros((N_DOF, 3)), rot=np.zeros((3, 3)), drot=np.zeros((3, 3)), scratch3=np.zeros((4, 3)),
        gh_force_world=np.zeros(3), hand_position=np.zeros(3), engin_dir=np.zeros((2, 3)),
        engin_jac=np.zeros((3, 7)),
    )
    for i in range(3):
        w.R[0, i, i, 0] = 1.0
    return w


@kernel
def _joint_motion(A, j, q_j, qd_j, qdd_j, W):
    """Frame j + 1 from frame j across joint j, every dual slot in one pass (all operations are slot-wise):

    r = R_j loc_j, P_{j+1} = P_j + r, k_j = R_j axis_j, a_{j+1} = a_j + al_j x r + w_j x (w_j x r),
    w_{j+1} = w_j + k_j qd_j, al_{j+1} = al_j + w_j x (k_j qd_j) + k_j qdd_j, R_{j+1} = R_j rot(axis_j, q_j);
    the origin's velocity v_{j+1} = v_j + w_j x r (value)."""
    f, c = j, j + 1
    n = frame_slots(c)
    loc, axis = A.joint_loc[j], A.joint_axis[j]
    Rf, Rc, rot = W.R[f], W.R[c], W.rot
    rotation_about_axis(axis, q_j, rot, W.drot)
    r0, w0, al0 = rot_slot(Rf, 0, loc), slot3(W.w[f], 0), slot3(W.al[f], 0)
    k0 = rot_slot(Rf, 0, axis)
    kq0 = (k0[0] * qd_j, k0[1] * qd_j, k0[2] * qd_j)
    wr0 = cross3(w0, r0)
    for k in range(n):
        rk, kk = rot_slot(Rf, k, loc), rot_slot(Rf, k, axis)
        kqk = (kk[0] * qd_j, kk[1] * qd_j, kk[2] * qd_j)
        put3(W.P[c], k, add3(slot3(W.P[f], k), rk))
        put3(W.k[j], k, kk)
        put3(W.w[c], k, add3(slot3(W.w[f], k), kqk))
        if k == 0:
            t1, t3, t4 = cross3(al0, r0), cross3(w0, wr0), cross3(w0, kq0)
        else:
            wk = slot3(W.w[f], k)
            t1 = cross_tangent(slot3(W.al[f], k), al0, rk, r0)
            t3 = cross_tangent(wk, w0, cross_tangent(wk, w0, rk, r0), wr0)
            t4 = cross_tangent(wk, w0, kqk, kq0)
        put3(W.acc[c], k, add3(add3(slot3(W.acc[f], k), t1), t3))
        al = add3(slot3(W.al[f], k), t4)
        put3(W.al[c], k, (al[0] + qdd_j * kk[0], al[1] + qdd_j * kk[1], al[2] + qdd_j * kk[2]))
        for a in range(3):
            for b in range(3):
                Rc[a, b, k] = Rf[a, 0, k] * rot[0, b] + Rf[a, 1, k] * rot[1, b] + Rf[a, 2, k] * rot[2, b]
    s = slot_q(j)
    for a in range(3):
        for b in range(3):
            Rc[a, b, s] += Rf[a, 0, 0] * W.drot[0, b] + Rf[a, 1, 0] * W.drot[1, b] + Rf[a, 2, 0] * W.drot[2, b]
    for a in range(3):
        W.vel[c, a] = W.vel[f, a] + wr0[a]


@kernel
def _forward_kinematics(A, q, qd, qdd, W):
    """Positions, angular velocities and accelerations of all frames (dual), origin velocities (values). Frame 0
    (thorax) is fixed."""
    for j in range(N_DOF):
        _joint_motion(A, j, q[j], qd[j], qdd[j], W)


@kernel
def _body_jacobian(A, b, W):
    """Body b's centre of mass (value, into W.scratch3[0]), its world inertia I_w = R I R^T (W.inertia_w) and
    its Jacobian columns for the joints proximal to it: jac_v[j] = k_j x (p - o_j), jac_iw[j] = I_w k_j."""
    f = A.body_frame[b]
    Rb, I, Iw = W.R[f, :, :, 0], A.body_inertia[b], W.inertia_w  # noqa: E741 (the inertia tensor)
    p = W.scratch3[0]
    for i in range(3):
        p[i] = W.P[f, i, 0] + Rb[i, 0] * A.body_com[b, 0] + Rb[i, 1] * A.body_com[b, 1] \
            + Rb[i, 2] * A.body_com[b, 2]
    for i in range(3):
        for m in range(3):
            acc = 0.0
            for a in range(3):
                acc += Rb[i, a] * (I[a, 0] * Rb[m, 0] + I[a, 1] * Rb[m, 1] + I[a, 2] * Rb[m, 2])
            Iw[i, m] = acc
    for j in range(f):
        k = W.k[j, :, 0]
        d = (p[0] - W.P[j + 1, 0, 0], p[1] - W.P[j + 1, 1, 0], p[2] - W.P[j + 1, 2, 0])
        jv, iw = cross3(vec3(k), d), matvec3(Iw, k)
        for i in range(3):
            W.jac_v[j, i] = jv[i]
            W.jac_iw[j, i] = iw[i]


@kernel
def _add_body_mass(A, b, W):
    """M += m Jv^T Jv + Jw^T I_w Jw of body b (Jv_j = jac_v[j], Jw_j = k_j), after :func:`_body_jacobian`."""
    f, m, M = A.body_frame[b], A.body_mass[b], W.M
    for i in range(f):
        for j in range(i + 1):
            v = m * (W.jac_v[i, 0] * W.jac_v[j, 0] + W.jac_v[i, 1] * W.jac_v[j, 1] + W.jac_v[i, 2] * W.jac_v[j, 2])
            v += W.k[i, 0, 0] * W.jac_iw[j, 0] + W.k[i, 1, 0] * W.jac_iw[j, 1] + W.k[i, 2, 0] * W.jac_iw[j, 2]
            M[i, j] += v
            if i != j:
                M[j, i] += v


@kernel
def _body_velocity_derivatives(A, b, W):
    """W.dF[i], W.dT[i]: body b's m (g - a_p) and -dH/dt differentiated with respect to qdot_i, for the
    joints i proximal to it (module docstring), after :func:`_body_jacobian` (whose I_w and jac_iw it uses)."""
    c, m, Iw = A.body_frame[b], A.body_mass[b], W.inertia_w
    p = vec3(W.scratch3[0])
    wc = vec3(W.w[c, :, 0])
    vc = cross3(wc, (p[0] - W.P[c, 0, 0], p[1] - W.P[c, 1, 0], p[2] - W.P[c, 2, 0]))
    vp = (W.vel[c, 0] + vc[0], W.vel[c, 1] + vc[1], W.vel[c, 2] + vc[2])
    Iw_wc = matvec3(Iw, wc)
    for i in range(c):
        k, wi, wn = vec3(W.k[i, :, 0]), vec3(W.w[i, :, 0]), vec3(W.w[i + 1, :, 0])
        d = (p[0] - W.P[i + 1, 0, 0], p[1] - W.P[i + 1, 1, 0], p[2] - W.P[i + 1, 2, 0])
        wn_d = cross3(wn, d)
        v_rel = (vp[0] - W.vel[i + 1, 0] - wn_d[0], vp[1] - W.vel[i + 1, 1] - wn_d[1],
                 vp[2] - W.vel[i + 1, 2] - wn_d[2])
        wi_k = cross3(wi, k)
        t1, t2, t3, t4 = cross3(wi_k, d), cross3(k, wn_d), cross3(wn, cross3(k, d)), cross3(k, v_rel)
        dal = cross3(k, (wc[0] - wn[0], wc[1] - wn[1], wc[2] - wn[2]))
        dal = (wi_k[0] + dal[0], wi_k[1] + dal[1], wi_k[2] + dal[2])
        h1, h2, h3 = matvec3(Iw, dal), cross3(k, Iw_wc), cross3(wc, vec3(W.jac_iw[i]))   # jac_iw[i] = I_w k_i
        for a in range(3):
            W.dF[i, a] = -m * (t1[a] + t2[a] + t3[a] + 2.0 * t4[a])
            W.dT[i, a] = -(h1[a] + h2[a] + h3[a])


@kernel
def _add_body_velocity_jacobian(A, b, W):
    """Av[j, i] += Jv_j . dF_i + k_j . dT_i over the joints j, i proximal to body b."""
    f = A.body_frame[b]
    for j in range(f):
        for i in range(f):
            W.Av[j, i] += W.jac_v[j, 0] * W.dF[i, 0] + W.jac_v[j, 1] * W.dF[i, 1] + W.jac_v[j, 2] * W.dF[i, 2] \
                + W.k[j, 0, 0] * W.dT[i, 0] + W.k[j, 1, 0] * W.dT[i, 1] + W.k[j, 2, 0] * W.dT[i, 2]


@kernel
def _mass_matrix_and_velocity_jacobian(A, W):
    """W.M (= -dQ/dqdd) and the bodies' part of W.Av (= dQ/dqdot), body by body from their Jacobians."""
    W.M[:, :] = 0.0
    W.Av[:, :] = 0.0
    for b in range(A.body_mass.shape[0]):
        _body_jacobian(A, b, W)
        _add_body_mass(A, b, W)
        _body_velocity_derivatives(A, b, W)
        _add_body_velocity_jacobian(A, b, W)


@kernel
def _body_wrench(A, b, W):
    """Add body b's gravity-minus-inertia wrench to the accumulators, every dual slot in one pass:
    F = m (g - a_p), a_p = a_f + al_f x c + w_f x (w_f x c) (c = R com), Fsum += F,
    Mo += p x F - dH/dt with dH/dt = R (I al_l + w_l x I w_l), w_l = R^T w, al_l = R^T al (body frame)."""
    f = A.body_frame[b]
    n = frame_slots(f)
    R, com, I, m = W.R[f], A.body_com[b], A.body_inertia[b], A.body_mass[b]  # noqa: E741 (inertia tensor)
    cw0, w0, al0 = rot_slot(R, 0, com), slot3(W.w[f], 0), slot3(W.al[f], 0)
    p0 = add3(slot3(W.P[f], 0), cw0)
    wc0 = cross3(w0, cw0)
    ab0 = add3(add3(slot3(W.acc[f], 0), cross3(al0, cw0)), cross3(w0, wc0))
    mg = m * A.body_weight[b]
    F0 = (-m * ab0[0] + mg * A.gravity[0], -m * ab0[1] + mg * A.gravity[1], -m * ab0[2] + mg * A.gravity[2])
    wl0, all0 = rot_t_value(R, w0), rot_t_value(R, al0)
    Iw0 = matvec3(I, wl0)
    h0 = add3(matvec3(I, all0), cross3(wl0, Iw0))
    _body_wrench_accumulate(W, 0, F0, cross3(p0, F0), rot_slot(R, 0, h0))
    for k in range(1, n):
        cwk, wk, alk = rot_slot(R, k, com), slot3(W.w[f], k), slot3(W.al[f], k)
        pk = add3(slot3(W.P[f], k), cwk)
        wck = cross_tangent(wk, w0, cwk, cw0)
        abk = add3(add3(slot3(W.acc[f], k), cross_tangent(alk, al0, cwk, cw0)),
                    cross_tangent(wk, w0, wck, wc0))
        Fk = scaled3(abk, -m)
        wlk, allk = rot_t_tangent(R, k, w0, wk), rot_t_tangent(R, k, al0, alk)
        hk = add3(matvec3(I, allk), cross_tangent(wlk, wl0, matvec3(I, wlk), Iw0))
        _body_wrench_accumulate(W, k, Fk, cross_tangent(pk, p0, Fk, F0), rot_tangent(R, k, h0, hk))


@kernel
def _body_wrench_accumulate(W, k, F, pxF, Hdot):
    """Slot k: Fsum += F, Mo += p x F, Mo += -1 * dH/dt."""
    for i in range(3):
        W.Fsum[i, k] += F[i]
        W.Mo[i, k] = (W.Mo[i, k] + pxF[i]) + -1.0 * Hdot[i]


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
def _joint_force(W, j):
    """Q_j = k_j . (Mo - o_j x Fsum) over every dual slot, o_j = P[j + 1] (the subtree's accumulators)."""
    o0, F0, k0 = slot3(W.P[j + 1], 0), slot3(W.Fsum, 0), slot3(W.k[j], 0)
    oF0 = cross3(o0, F0)
    m0 = (W.Mo[0, 0] - oF0[0], W.Mo[1, 0] - oF0[1], W.Mo[2, 0] - oF0[2])
    for k in range(1, ND):
        ok, Fk, kk = slot3(W.P[j + 1], k), slot3(W.Fsum, k), slot3(W.k[j], k)
        oFk = cross_tangent(ok, o0, Fk, F0)
        mk = (W.Mo[0, k] - oFk[0], W.Mo[1, k] - oFk[1], W.Mo[2, k] - oFk[2])
        W.Q[j, k] = (kk[0] * m0[0] + k0[0] * mk[0] + kk[1] * m0[1] + k0[1] * mk[1]
                     + kk[2] * m0[2] + k0[2] * mk[2])
    W.Q[j, 0] = k0[0] * m0[0] + k0[1] * m0[1] + k0[2] * m0[2]


@kernel
def multibody_eval(A, q, qd, qdd, loads, W):
    """Fill W.Q (generalized forces without muscles, dual in q), W.Av (dQ/dqdot) and W.M (mass matrix) at
    (q, qd, qdd).

    loads = (M_th_y, M_th_z, M_hum_y, M_elbow, M_pronation, armsupport_distance, armsupport_force,
    hand_force_xyz): see ``sim.das3.model.LOAD_NAMES``. Output fields are overwritten.
    """
    _forward_kinematics(A, q, qd, qdd, W)
    _mass_matrix_and_velocity_jacobian(A, W)
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
        _joint_force(W, c - 1)
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
        W.Av[j, j] -= damping
    # hand centre position (values)
    for i in range(3):
        W.hand_position[i] = W.P[RADIUS_FRAME, i, 0] + W.R[RADIUS_FRAME, i, 0, 0] * A.hand_com_radius[0] \
            + W.R[RADIUS_FRAME, i, 1, 0] * A.hand_com_radius[1] + W.R[RADIUS_FRAME, i, 2, 0] * A.hand_com_radius[2]
