"""The step of the reduced MTG arm (:mod:`sim.mtg.plant`) over its multibody kernels (:mod:`sim.mtg.arm`).

Step (linearly implicit Euler): the MTG and damping terms are stiff and are taken implicitly with their
exact partial derivatives K = dQ/dq and D = dQ/dqd (the moment basis held fixed over the step); gravity and
velocity products are not stiff at these steps and enter explicitly:

    (M - h D - h^2 K) dv = h Q_n + h^2 K v_n,   v_{n+1} = v_n + dv,   q_{n+1} = q_n + h v_{n+1}

and activation by implicit Euler of da/dt = (u - a)(c1 u + c2) (Chadwick et al. 2014, eq. 1) with u at the
step's end.
"""
from __future__ import annotations

import math

from sim.jit.bundle import borrowed_items
from sim.jit.kernel import entry, kernel
from sim.mtg.arm import N_COORD, cross, dot, generalized_forces, hand_point, kinematics
from sim.mtg.reflex import add_reflex, record_velocity

MTG_STEP_OK, MTG_STEP_BAD_INPUT, MTG_STEP_DIVERGED, MTG_STEP_SINGULAR = 0, 1, 2, 3
MTG_STEP_MESSAGES = {
    MTG_STEP_BAD_INPUT: "excitation is NaN or infinite",
    MTG_STEP_DIVERGED: "non-finite state or singular iteration matrix",
    MTG_STEP_SINGULAR: "thoracohumeral elevation at the YZY singularity (plane and axial rotation undefined)",
}
SINGULAR_ELEVATION_RAD = 1e-3
"""Below this elevation (or within it of 180 deg) the plane of elevation and the axial rotation rotate about
the same axis and the mass matrix in these coordinates is singular: the step refuses such a state."""


@kernel
def _solve(S, n):
    """Gaussian elimination with partial pivoting of S[:, :n] x = S[:, n]; x in S[:, n]. False if singular."""
    for c in range(n):
        p = c
        for r in range(c + 1, n):
            if abs(S[r, c]) > abs(S[p, c]):
                p = r
        if not abs(S[p, c]) > 0.0:
            return False
        if p != c:
            for k in range(c, n + 1):
                S[c, k], S[p, k] = S[p, k], S[c, k]
        for r in range(c + 1, n):
            f = S[r, c] / S[c, c]
            for k in range(c, n + 1):
                S[r, k] -= f * S[c, k]
    for c in range(n - 1, -1, -1):
        v = S[c, n]
        for k in range(c + 1, n):
            v -= S[c, k] * S[k, n]
        S[c, n] = v / S[c, c]
    return True


@kernel
def _activate(A, a, u, h):
    """a <- implicit Euler of da/dt = (u - a)(c1 u + c2), the rising pair while u >= a (Chadwick eq. 1)."""
    for m in range(a.shape[0]):
        c = A.mtg_act[m]
        rate = c[0] * u[m] + c[1] if u[m] >= a[m] else c[2] * u[m] + c[3]
        a[m] = (a[m] + h * rate * u[m]) / (1.0 + h * rate)


@kernel
def mtg_step(A, W, x, u, loads, h):
    """One step of the state x = (q, qd, a); u (n,) the excitation at the step's end, within [0, 1]."""
    q, qd, a = x[0:5], x[5:10], x[10:]
    _activate(A, a, u, h)
    generalized_forces(A, q, qd, a, loads, W)
    S = W.S
    for i in range(N_COORD):
        rhs = h * W.Q[i]
        for j in range(N_COORD):
            S[i, j] = W.M[i, j] - h * W.D[i, j] - h * h * W.K[i, j]
            rhs += h * h * W.K[i, j] * qd[j]
        S[i, N_COORD] = rhs
    if not _solve(S, N_COORD):
        return MTG_STEP_DIVERGED
    for i in range(N_COORD):
        qd[i] += S[i, N_COORD]
        q[i] += h * qd[i]
    for i in range(x.shape[0]):
        if not math.isfinite(x[i]):
            return MTG_STEP_DIVERGED
    if math.sin(q[1]) < SINGULAR_ELEVATION_RAD:
        return MTG_STEP_SINGULAR
    return MTG_STEP_OK


@kernel
def mtg_outputs(A, x, W):
    """DAS3-order angles and velocities (girdle frozen, GH YZY angles of R_scapula^T R_humerus and their rates),
    thoracohumeral angles and the hand position of the state of the last kinematics call."""
    q, qd = x[0:5], x[5:10]
    for i in range(6):
        W.q11[i] = A.girdle_q[i]
        W.qd11[i] = 0.0
    Rs = A.scapula_R
    G = W.rot
    for i in range(3):
        for j in range(3):
            G[i, j] = Rs[0, i] * W.R[0, 0, j] + Rs[1, i] * W.R[0, 1, j] + Rs[2, i] * W.R[0, 2, j]
    W.q11[6] = math.atan2(G[2, 1], -G[0, 1])
    W.q11[7] = math.acos(min(1.0, max(-1.0, G[1, 1])))
    W.q11[8] = math.atan2(G[1, 2], G[1, 0])
    _gh_rates(W.q11[6], W.q11[7], Rs, W)
    W.q11[9], W.q11[10] = q[3], q[4]
    W.qd11[9], W.qd11[10] = qd[3], qd[4]
    for i in range(3):
        W.th_angles[i] = q[i]
    hand_point(A, W, W.hand_position)


@kernel
def _gh_rates(phi, theta, Rs, W):
    """GH YZY rates from the humerus angular velocity in the scapula frame: omega = phi' e_y + theta' z' +
    psi' y_h, with z' = (sin phi, 0, cos phi) and y_h the humerus Y axis, solved by Cramer's rule."""
    t = W.tmp
    for i in range(3):       # omega_s = Rs^T omega_h
        t[0, i] = Rs[0, i] * W.omega[0, 0] + Rs[1, i] * W.omega[0, 1] + Rs[2, i] * W.omega[0, 2]
    e_y = t[1]
    e_y[0], e_y[1], e_y[2] = 0.0, 1.0, 0.0
    z = t[2]
    z[0], z[1], z[2] = math.sin(phi), 0.0, math.cos(phi)
    y = t[3]
    st = math.sin(theta)
    y[0], y[1], y[2] = -st * math.cos(phi), math.cos(theta), st * math.sin(phi)
    cross(z, y, t[4])
    det = dot(e_y, t[4])
    if abs(det) < 1e-12:
        W.qd11[6] = W.qd11[7] = W.qd11[8] = math.nan
        return
    W.qd11[6] = dot(t[0], t[4]) / det
    cross(t[0], y, t[5])
    W.qd11[7] = dot(e_y, t[5]) / det
    cross(z, t[0], t[5])
    W.qd11[8] = dot(e_y, t[5]) / det


@kernel
def mtg_steps(A, W, x, u_applied, u, loads, h, n):
    """n steps holding the excitation u (clipped to [0, 1], times the patient's gate of each MTG, into u_applied;
    with spastic elements, their reflexes added before each step and the velocities recorded after it,
    :mod:`sim.mtg.reflex`); returns (status, excitations clipped, steps done). A failed step leaves x at the last
    good state; the outputs describe x."""
    clipped = 0
    for m in range(u.shape[0]):
        v = u[m]
        if not math.isfinite(v):
            return MTG_STEP_BAD_INPUT, 0, 0
        c = min(1.0, max(0.0, v))
        if c != v:
            clipped += 1
        u_applied[m] = c * A.mtg_gate[m]
    spastic = A.reflex_mtg.shape[0] > 0
    if spastic:
        for m in range(u.shape[0]):
            W.u_base[m] = u_applied[m]
    status, done = MTG_STEP_OK, 0
    for k in range(n):
        if spastic:
            add_reflex(A, W, u_applied)
        for i in range(x.shape[0]):
            W.x_good[i] = x[i]
        status = mtg_step(A, W, x, u_applied, loads, h)
        if status != MTG_STEP_OK:
            for i in range(x.shape[0]):
                x[i] = W.x_good[i]
            break
        if spastic:
            record_velocity(W, x)
        done += 1
    refresh_outputs(A, W, x)
    return status, clipped, done


@kernel
def refresh_outputs(A, W, x):
    """The outputs of the state x."""
    kinematics(A, x[0:5], x[5:10], W)
    mtg_outputs(A, x, W)


@kernel
def steps_of_bundle(bundle, x, u_applied, u, loads, h, n):
    """:func:`mtg_steps` on the bundle's model and workspace."""
    A, W = borrowed_items(bundle)
    return mtg_steps(A, W, x, u_applied, u, loads, h, n)


@kernel
def refresh_bundle(bundle, x):
    """:func:`refresh_outputs` on the bundle's model and workspace."""
    A, W = borrowed_items(bundle)
    refresh_outputs(A, W, x)


@entry
def bundle_steps(bundle, x, u_applied, u, loads, h, n):
    """:func:`mtg_steps` from Python with the model and workspace in one StructRef (one object to unbox; the
    entry only passes it on, ``sim.jit.bundle``)."""
    return steps_of_bundle(bundle, x, u_applied, u, loads, h, n)


@entry
def bundle_refresh(bundle, x):
    """:func:`refresh_outputs` from Python."""
    refresh_bundle(bundle, x)
