"""The reduced muscle-torque-generator (MTG) arm's multibody kernels (:mod:`sim.mtg.plant`): kinematics,
mass matrix and generalized forces of the state; the step is :mod:`sim.mtg.step`.

Five generalized coordinates q = (plane of elevation, elevation, axial rotation, elbow flexion, pronation):
the thoracohumeral YZY angles of the humerus (DAS3 spec "Outputs") as three revolute joints about the thorax
Y axis, the floating Z axis and the humeral Y axis through the glenohumeral centre of the frozen girdle, then
the DAS3 elbow (ELx) and forearm (PSy) joints. Bodies, masses, centres of mass and inertias are the DAS3
humerus, ulna, radius and hand (spec "Multibody").

Equations of motion (spec "Multibody", recursive Newton-Euler in the thorax frame):

    M(q) qdd = Q(q, qd, a) = sum_bodies k_j . [(p_c - o_j) x m (w g - a_c) - dH_c/dt]   (qdd = 0 in a_c, dH/dt)
                             + k_j . M_mtg + Q_loads - B qd

with range stops K2 (lo - q)^2 below a coordinate's range and -K2 (q - hi)^2 above it (the DAS3 joint-range law,
spec "Passive joint moments"; :mod:`sim.mtg.model` gives the ranges), the MTG moments applied as the DAS3
external moments are (``sim.das3.kernels.multibody._thoracohumeral_torque``):
M_mtg = T_plane e_y + T_elev z' + T_axial y_h on the humerus, T_c = sum over the coordinate's MTGs of
u tau(a, q_c, u qd_c) (Millard et al. 2019, Eq. (3); ``sim.mtg.curves.mtg_torque``, its curves tabled by
``sim.mtg.curve_table``), and the elbow and
pronation MTGs as torques about their own joints. B is the DAS3 joint damping (spec "Passive joint moments").
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from sim.jit.kernel import kernel
from sim.mtg.curve_table import tabled_torque
from sim.mtg.table import hermite_table

N_COORD = 5

class MtgArrays(NamedTuple):
    """The reduced arm's constants (read-only during a run)."""

    gh_centre: np.ndarray      # (3,) thorax frame, m
    elbow_loc: np.ndarray      # (3,) humerus frame
    elbow_axis: np.ndarray     # (3,) humerus frame, unit
    pron_loc: np.ndarray       # (3,) ulna frame
    pron_axis: np.ndarray      # (3,) ulna frame, unit
    body_seg: np.ndarray       # (nb,) int: 0 humerus, 1 ulna, 2 radius
    body_mass: np.ndarray      # (nb,) kg
    body_com: np.ndarray       # (nb, 3) segment frame, m
    body_inertia: np.ndarray   # (nb, 3, 3) about the COM, segment frame, kg m^2
    body_weight: np.ndarray    # (nb,) 1: gravity acts, 0: inertia only (the DAS3 hand)
    gravity: np.ndarray        # (3,) m/s^2
    hand_com: np.ndarray       # (3,) radius frame
    damping: np.ndarray        # (5,) N m s/rad
    stop_lo: np.ndarray        # (5,) rad: range stops K2 (lo - q)^2 below, -K2 (q - hi)^2 above
    stop_hi: np.ndarray        # (5,) rad
    stop_k2: np.ndarray        # (5,) N m/rad^2
    scapula_R: np.ndarray      # (3, 3) frozen scapula orientation (thorax frame), for the GH angles
    girdle_q: np.ndarray       # (6,) the frozen clavicle and scapula angles (DAS3 DOFs 0-5)
    mtg_coord: np.ndarray      # (n,) int coordinate of each MTG
    mtg_dir: np.ndarray        # (n,) +1 or -1
    mtg_const: np.ndarray      # (n, 4) theta_opt, omega_max, tau_max (times the patient's strength factor), beta
    mtg_gate: np.ndarray       # (n,) the patient's excitation gate (sim.mtg.patient; 1 able-bodied)
    reflex_mtg: np.ndarray     # (k,) int: the MTG of each spastic element's reflex (sim.mtg.patient.ActuatorReflex)
    reflex_share: np.ndarray   # (k,) its share of that MTG's capacity
    reflex_rate: np.ndarray    # (k,) its lengthening velocity per stretch of the coordinate, Lceopt/s per rad/s
    reflex_gain: np.ndarray    # (k,) excitation per Lceopt/s above the threshold
    reflex_threshold: np.ndarray  # (k,) Lceopt/s
    contr_start: np.ndarray    # (5,) a contracture's moment table per coordinate (sim.mtg.contracture): first knot, rad
    contr_step: np.ndarray     # (5,) knot spacing, rad
    contr_knots: np.ndarray    # (5,) int: knots (0: no table)
    contr_value: np.ndarray    # (5, k) N m at the knots
    contr_slope: np.ndarray    # (5, k) N m/rad at the knots
    mtg_fit: np.ndarray        # (n, 7) s_a, s_v, delta_p, lambda_a, lambda_v, lambda_p, s_tau
    mtg_act: np.ndarray        # (n, 4) c1, c2 rising; c1, c2 falling
    curve_start: np.ndarray    # (n, 3, N) the tA, tV, tPE curves as tables (sim.mtg.curve_table): interval starts
    curve_width: np.ndarray    # (n, 3, N) their widths
    curve_coef: np.ndarray     # (n, 3, N, 6) their quintics
    curve_count: np.ndarray    # (n, 3) int: intervals of each curve


class MtgWork(NamedTuple):
    """Per-run workspace (outputs overwritten every step)."""

    R: np.ndarray          # (3, 3, 3) humerus, ulna, radius orientations
    origin: np.ndarray     # (3, 3) GH, elbow, pronation joint centres
    axis: np.ndarray       # (5, 3) joint axes (thorax frame)
    omega: np.ndarray      # (3, 3) segment angular velocities
    alpha: np.ndarray      # (3, 3) segment angular accelerations at qdd = 0
    acc: np.ndarray        # (3, 3) origin accelerations at qdd = 0
    rot: np.ndarray        # (3, 3) scratch rotation
    tmp: np.ndarray        # (8, 3) scratch vectors
    force: np.ndarray      # (nb, 3) body forces m (w g - a_c)
    moment: np.ndarray     # (nb, 3) -dH/dt
    com: np.ndarray        # (nb, 3) COM positions
    jv: np.ndarray         # (5, 3) scratch linear Jacobian of one body
    Q: np.ndarray          # (5,) generalized forces
    M: np.ndarray          # (5, 5) mass matrix
    K: np.ndarray          # (5, 5) dQ/dq of the stiff terms
    D: np.ndarray          # (5, 5) dQ/dqd of the stiff terms
    S: np.ndarray          # (5, 6) iteration matrix | right-hand side
    coord_torque: np.ndarray  # (5, 3) per coordinate: T, dT/dq, dT/dqd
    tau: np.ndarray        # (n,) MTG torques along their directions, N m (output)
    q11: np.ndarray        # (11,) DAS3-order angles (output)
    qd11: np.ndarray       # (11,) DAS3-order velocities (output)
    th_angles: np.ndarray  # (3,) output
    hand_position: np.ndarray  # (3,) output
    x_good: np.ndarray     # (10 + n,) the state before the step in progress
    rx_delay: np.ndarray   # (k,) int: each reflex row's delay in steps (>= 1)
    rx_ring: np.ndarray    # (5, depth): the coordinate velocities at the end of each of the last steps
    rx_cursor: np.ndarray  # (1,) int: the ring column the next velocities go to
    rx_excitation: np.ndarray  # (n,) scratch: each MTG's reflex excitation
    u_base: np.ndarray     # (n,) the held excitation of the steps being taken, before the reflex


def new_mtg_work(n_bodies: int, n_mtg: int, reflex_delay_steps=None) -> MtgWork:
    """The workspace; ``reflex_delay_steps``: each reflex row's delay in plant steps (none: no reflex)."""
    delay = np.zeros(0, np.int64) if reflex_delay_steps is None else np.asarray(reflex_delay_steps, np.int64)
    depth = int(delay.max()) + 1 if delay.size else 1
    return MtgWork(R=np.zeros((3, 3, 3)), origin=np.zeros((3, 3)), axis=np.zeros((5, 3)), omega=np.zeros((3, 3)),
                   alpha=np.zeros((3, 3)), acc=np.zeros((3, 3)), rot=np.zeros((3, 3)), tmp=np.zeros((8, 3)),
                   force=np.zeros((n_bodies, 3)), moment=np.zeros((n_bodies, 3)), com=np.zeros((n_bodies, 3)),
                   jv=np.zeros((5, 3)), Q=np.zeros(5), M=np.zeros((5, 5)), K=np.zeros((5, 5)), D=np.zeros((5, 5)),
                   S=np.zeros((5, 6)), coord_torque=np.zeros((5, 3)), tau=np.zeros(n_mtg), q11=np.zeros(11),
                   qd11=np.zeros(11), th_angles=np.zeros(3), hand_position=np.zeros(3),
                   x_good=np.zeros(2 * N_COORD + n_mtg), rx_delay=delay, rx_ring=np.zeros((N_COORD, depth)),
                   rx_cursor=np.zeros(1, np.int64), rx_excitation=np.zeros(n_mtg), u_base=np.zeros(n_mtg))


# --- small vector kernels -----------------------------------------------------------------------------------------


@kernel
def cross(a, b, out):
    x = a[1] * b[2] - a[2] * b[1]
    y = a[2] * b[0] - a[0] * b[2]
    z = a[0] * b[1] - a[1] * b[0]
    out[0], out[1], out[2] = x, y, z


@kernel
def dot(a, b):
    return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]


@kernel
def _matvec(R, v, out):
    for i in range(3):
        out[i] = R[i, 0] * v[0] + R[i, 1] * v[1] + R[i, 2] * v[2]


@kernel
def _axis_rotation(axis, angle, out):
    """Rodrigues: rotation by ``angle`` about the unit ``axis``."""
    c, s = math.cos(angle), math.sin(angle)
    t = 1.0 - c
    x, y, z = axis[0], axis[1], axis[2]
    out[0, 0], out[0, 1], out[0, 2] = t * x * x + c, t * x * y - s * z, t * x * z + s * y
    out[1, 0], out[1, 1], out[1, 2] = t * x * y + s * z, t * y * y + c, t * y * z - s * x
    out[2, 0], out[2, 1], out[2, 2] = t * x * z - s * y, t * y * z + s * x, t * z * z + c


@kernel
def _compose(Ra, Rb, out):
    """out = Ra Rb (out must not alias Ra or Rb)."""
    for i in range(3):
        for j in range(3):
            out[i, j] = Ra[i, 0] * Rb[0, j] + Ra[i, 1] * Rb[1, j] + Ra[i, 2] * Rb[2, j]


# --- kinematics -------------------------------------------------------------------------------------------------


@kernel
def humerus_rotation(phi, theta, psi, R):
    """R = Ry(phi) Rz(theta) Ry(psi) (thoracohumeral YZY)."""
    cf, sf, ct, st, cp, sp = math.cos(phi), math.sin(phi), math.cos(theta), math.sin(theta), math.cos(psi), \
        math.sin(psi)
    R[0, 0] = cf * ct * cp - sf * sp
    R[0, 1] = -cf * st
    R[0, 2] = cf * ct * sp + sf * cp
    R[1, 0] = st * cp
    R[1, 1] = ct
    R[1, 2] = st * sp
    R[2, 0] = -sf * ct * cp - cf * sp
    R[2, 1] = sf * st
    R[2, 2] = -sf * ct * sp + cf * cp


@kernel
def kinematics(A, q, qd, W):
    """Segment orientations, joint centres and axes; angular velocities and the qdd = 0 accelerations."""
    R, o, k, w, al, acc, t = W.R, W.origin, W.axis, W.omega, W.alpha, W.acc, W.tmp
    humerus_rotation(q[0], q[1], q[2], R[0])
    k[0, 0], k[0, 1], k[0, 2] = 0.0, 1.0, 0.0
    cf, sf = math.cos(q[0]), math.sin(q[0])
    k[1, 0], k[1, 1], k[1, 2] = sf, 0.0, cf           # Ry(phi) e_z
    k[2, 0], k[2, 1], k[2, 2] = R[0, 0, 1], R[0, 1, 1], R[0, 2, 1]
    for i in range(3):
        o[0, i] = A.gh_centre[i]
    _matvec(R[0], A.elbow_loc, t[0])
    _matvec(R[0], A.elbow_axis, k[3])
    _axis_rotation(A.elbow_axis, q[3], W.rot)
    _compose(R[0], W.rot, R[1])
    _matvec(R[1], A.pron_loc, t[1])
    _matvec(R[1], A.pron_axis, k[4])
    _axis_rotation(A.pron_axis, q[4], W.rot)
    _compose(R[1], W.rot, R[2])
    for i in range(3):
        o[1, i] = o[0, i] + t[0, i]
        o[2, i] = o[1, i] + t[1, i]
    # angular velocities and accelerations (qdd = 0): al_c = al_f + w_f x k qd
    for i in range(3):
        t[2, i] = k[0, i] * qd[0]
        t[3, i] = t[2, i] + k[1, i] * qd[1]            # omega after the Z joint
        t[4, i] = k[1, i] * qd[1]
        t[5, i] = k[2, i] * qd[2]
    cross(t[2], t[4], t[6])
    cross(t[3], t[5], t[7])
    for i in range(3):
        w[0, i] = t[3, i] + t[5, i]
        al[0, i] = t[6, i] + t[7, i]
        t[4, i] = k[3, i] * qd[3]
    cross(w[0], t[4], t[6])
    for i in range(3):
        w[1, i] = w[0, i] + t[4, i]
        al[1, i] = al[0, i] + t[6, i]
        t[5, i] = k[4, i] * qd[4]
    cross(w[1], t[5], t[7])
    for i in range(3):
        w[2, i] = w[1, i] + t[5, i]
        al[2, i] = al[1, i] + t[7, i]
        acc[0, i] = 0.0
    for s in range(2):          # origin s+1 fixed in segment s: a_o + al x r + w x (w x r)
        for i in range(3):
            t[0, i] = o[s + 1, i] - o[s, i]
        cross(al[s], t[0], t[1])
        cross(w[s], t[0], t[2])
        cross(w[s], t[2], t[3])
        for i in range(3):
            acc[s + 1, i] = acc[s, i] + t[1, i] + t[3, i]


@kernel
def _body_terms(A, W):
    """Each body's COM, m (w g - a_c) and -dH/dt (thorax frame), at qdd = 0."""
    t = W.tmp
    for b in range(A.body_mass.shape[0]):
        s = A.body_seg[b]
        R = W.R[s]
        _matvec(R, A.body_com[b], t[0])
        for i in range(3):
            W.com[b, i] = W.origin[s, i] + t[0, i]
        cross(W.alpha[s], t[0], t[1])
        cross(W.omega[s], t[0], t[2])
        cross(W.omega[s], t[2], t[3])
        m = A.body_mass[b]
        for i in range(3):
            W.force[b, i] = m * (A.body_weight[b] * A.gravity[i] - W.acc[s, i] - t[1, i] - t[3, i])
        # dH/dt = R (I al_l + w_l x I w_l), w_l = R^T w
        for i in range(3):
            t[4, i] = R[0, i] * W.omega[s, 0] + R[1, i] * W.omega[s, 1] + R[2, i] * W.omega[s, 2]
            t[5, i] = R[0, i] * W.alpha[s, 0] + R[1, i] * W.alpha[s, 1] + R[2, i] * W.alpha[s, 2]
        _matvec(A.body_inertia[b], t[4], t[6])
        cross(t[4], t[6], t[7])
        _matvec(A.body_inertia[b], t[5], t[6])
        for i in range(3):
            t[6, i] += t[7, i]
        _matvec(R, t[6], t[7])
        for i in range(3):
            W.moment[b, i] = -t[7, i]


@kernel
def _joint_of_segment(j):
    """The segment whose origin is joint j's centre: joints 0-2 at the GH centre, 3 elbow, 4 pronation."""
    return 0 if j < 3 else j - 2


@kernel
def _point_force_q(W, j, P, F):
    """k_j . ((P - o_j) x F)."""
    s = _joint_of_segment(j)
    t = W.tmp[7]
    d0, d1, d2 = P[0] - W.origin[s, 0], P[1] - W.origin[s, 1], P[2] - W.origin[s, 2]
    t[0] = d1 * F[2] - d2 * F[1]
    t[1] = d2 * F[0] - d0 * F[2]
    t[2] = d0 * F[1] - d1 * F[0]
    return dot(W.axis[j], t)


@kernel
def _bias_forces(A, loads, W):
    """W.Q <- the generalized forces of gravity, inertia at qdd = 0 and the external loads (no MTGs)."""
    _body_terms(A, W)
    t = W.tmp
    for j in range(N_COORD):
        first = 0 if j < 3 else j - 2
        acc = 0.0
        for b in range(A.body_mass.shape[0]):
            if A.body_seg[b] >= first:
                acc += _point_force_q(W, j, W.com[b], W.force[b]) + dot(W.axis[j], W.moment[b])
        W.Q[j] = acc
    # external moments on the humerus as in the DAS3 (loads 0-2), elbow and pronation moments (3-4)
    for i in range(3):
        t[0, i] = loads[0] * W.axis[0, i] + loads[1] * W.axis[1, i] + loads[2] * W.axis[2, i]
    for j in range(3):
        W.Q[j] += dot(W.axis[j], t[0])
    W.Q[3] += loads[3]
    W.Q[4] += loads[4]
    if loads[6] != 0.0:        # arm support: vertical force on the ulna's -y axis, loads[5] below the elbow
        t[1, 0], t[1, 1], t[1, 2] = 0.0, -loads[5], 0.0
        _matvec(W.R[1], t[1], t[2])
        for i in range(3):
            t[2, i] += W.origin[1, i]
        t[3, 0], t[3, 1], t[3, 2] = 0.0, loads[6], 0.0
        for j in range(4):
            W.Q[j] += _point_force_q(W, j, t[2], t[3])
    if loads[7] != 0.0 or loads[8] != 0.0 or loads[9] != 0.0:
        hand_point(A, W, t[2])
        for j in range(N_COORD):
            W.Q[j] += _point_force_q(W, j, t[2], loads[7:10])


@kernel
def hand_point(A, W, out):
    """The hand centre of mass (thorax frame)."""
    _matvec(W.R[2], A.hand_com, out)
    for i in range(3):
        out[i] += W.origin[2, i]


@kernel
def mass_matrix(A, W):
    """M = sum_b m Jv^T Jv + Jw^T (R I R^T) Jw, Jv columns k_j x (p_c - o_j), Jw columns k_j."""
    M, jv, t = W.M, W.jv, W.tmp
    M[:, :] = 0.0
    for b in range(A.body_mass.shape[0]):
        s = A.body_seg[b]
        n = 3 + s
        for j in range(n):
            so = _joint_of_segment(j)
            for i in range(3):
                t[0, i] = W.com[b, i] - W.origin[so, i]
            cross(W.axis[j], t[0], jv[j])
        m = A.body_mass[b]
        R = W.R[s]
        for j in range(n):
            # I_w k_j = R I R^T k_j
            for i in range(3):
                t[1, i] = R[0, i] * W.axis[j, 0] + R[1, i] * W.axis[j, 1] + R[2, i] * W.axis[j, 2]
            _matvec(A.body_inertia[b], t[1], t[2])
            _matvec(R, t[2], t[3])
            for i in range(j, n):
                v = m * dot(jv[i], jv[j]) + dot(W.axis[i], t[3])
                M[i, j] += v
                if i != j:
                    M[j, i] += v


@kernel
def mtg_torques(A, q, qd, a, W):
    """W.tau <- every MTG's Eq. (3) torque along its direction; W.coord_torque[c] <- (T_c, dT_c/dq_c,
    dT_c/dqd_c), T_c = sum u tau of the coordinate's MTGs."""
    ct = W.coord_torque
    ct[:, :] = 0.0
    for m in range(A.mtg_coord.shape[0]):
        c = A.mtg_coord[m]
        u = A.mtg_dir[m]
        tau, dth, dom, _ = tabled_torque(A.curve_start, A.curve_width, A.curve_coef, A.curve_count, m, a[m], q[c],
                                         u * qd[c], A.mtg_const[m], A.mtg_fit[m])
        W.tau[m] = tau
        ct[c, 0] += u * tau
        ct[c, 1] += u * dth
        ct[c, 2] += dom            # u * u
    return 0


@kernel
def bias_and_mass(A, q, qd, loads, W):
    """W.Q <- gravity, inertia at qdd = 0 and the external loads (no MTGs, no damping); W.M <- M(q)."""
    kinematics(A, q, qd, W)
    _bias_forces(A, loads, W)
    mass_matrix(A, W)


@kernel
def generalized_forces(A, q, qd, a, loads, W):
    """W.Q, W.M, W.K, W.D at (q, qd, a): Q exactly; K, D hold the stiff partial derivatives (MTGs with the
    moment basis fixed, damping, range stops)."""
    bias_and_mass(A, q, qd, loads, W)
    mtg_torques(A, q, qd, a, W)
    ct = W.coord_torque
    for j in range(3):
        for c in range(3):
            g = dot(W.axis[j], W.axis[c])
            W.Q[j] += g * ct[c, 0]
            W.K[j, c] = g * ct[c, 1]
            W.D[j, c] = g * ct[c, 2]
        for c in range(3, N_COORD):
            W.K[j, c] = 0.0
            W.D[j, c] = 0.0
    for j in range(3, N_COORD):
        for c in range(N_COORD):
            W.K[j, c] = 0.0
            W.D[j, c] = 0.0
        W.Q[j] += ct[j, 0]
        W.K[j, j] = ct[j, 1]
        W.D[j, j] = ct[j, 2]
    for j in range(N_COORD):
        W.Q[j] -= A.damping[j] * qd[j]
        W.D[j, j] -= A.damping[j]
        if A.contr_knots[j] > 0:
            v, dv = hermite_table(A.contr_start[j], A.contr_step[j], A.contr_knots[j], A.contr_value[j],
                                 A.contr_slope[j], q[j])
            W.Q[j] += v
            W.K[j, j] += dv
        if q[j] < A.stop_lo[j]:
            e = A.stop_lo[j] - q[j]
            W.Q[j] += A.stop_k2[j] * e * e
            W.K[j, j] -= 2.0 * A.stop_k2[j] * e
        elif q[j] > A.stop_hi[j]:
            e = q[j] - A.stop_hi[j]
            W.Q[j] -= A.stop_k2[j] * e * e
            W.K[j, j] -= 2.0 * A.stop_k2[j] * e
