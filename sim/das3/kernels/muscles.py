"""Muscle part of the DAS3 residual: path lengths, contraction dynamics and muscle moments.

Spec "Muscle-tendon path" and "Muscle contraction" (paper eqs. 2-3 and App. A). Per muscle i:

    L_i(q) = sum_t c_t prod_j q_j^e_tj         (value, exact gradient and Hessian)
    g_i = F4 - (a F1 F2 + F3) cos(p) - F5      (contraction residual, normalised by Fmax)
    F_i = Fmax F4,   tau_m = -sum_i (dL_i/dq) F_i

and the exact partial derivatives the Rosenbrock step and the tests need.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from sim.das3.kernels.polynomials import POLY_CHUNK
from sim.das3.kernels.thelen import thelen_contraction, thelen_rest_state
from sim.das3.layout import (
    ECC_FORCE_MAX,
    FL_WIDTH,
    HILL_A,
    MUS_C1,
    MUS_C1_FALL,
    MUS_C2,
    MUS_C2_FALL,
    MUS_FMAX,
    MUS_K1PEE,
    MUS_K1SEE,
    MUS_KIND,
    MUS_KPEE,
    MUS_KSEE,
    MUS_LCEOPT,
    MUS_PEESLACK,
    MUS_PENN_B,
    MUS_SEESLACK,
    MUS_VMAX,
    MUSCLE_THELEN2003,
    N_DOF,
    N_MUS,
    SDOT_DAMPING,
)
from sim.jit.kernel import kernel


class MuscleWork(NamedTuple):
    """Preallocated workspace and outputs of :func:`muscle_eval`."""

    mono: np.ndarray     # (NM,) every monomial of q used by the polynomials (see ModelArrays.mono_*)
    L: np.ndarray        # (138,) muscle-tendon length, m
    G: np.ndarray        # (138, 9) dL/dq over the muscle's own DOFs (local order); a view of G_flat
    G_flat: np.ndarray   # (138 * 9,) the same memory, row 9 i + k
    force: np.ndarray    # (138,) N
    dF4: np.ndarray      # (138,) dF4/de (SEE), 1/m
    g: np.ndarray        # (138,) contraction residual
    g_s: np.ndarray      # (138,) dg/ds
    g_sd: np.ndarray     # (138,) dg/dsdot
    g_a: np.ndarray      # (138,) dg/da       (dg/dq = dF4 * G)
    g_s_a: np.ndarray    # (138,) d2g/ds da   (g is affine in a: these give dg/ds, dg/dsdot at any a)
    g_sd_a: np.ndarray   # (138,) d2g/dsdot da
    tau: np.ndarray      # (11,) muscle generalized forces
    dtau_dq: np.ndarray  # (11, 11) path-curvature part of dtau/dq (see muscle_eval)
    C: np.ndarray        # (138, 9) d tau / d s_i on the muscle's DOFs (local order)
    hess_flat: np.ndarray  # (11 * 11,) scratch: sum_i F_i d2L_i/dq_a dq_b at a * 11 + b, a <= b
    hess_chunk: np.ndarray  # (n_hess_chunks,) each chunk of the path Hessians at q (ModelArrays.hess_*)


def new_muscle_work(n_monomials: int, n_hess_chunks: int) -> MuscleWork:
    G_flat = np.zeros(N_MUS * 9)
    return MuscleWork(
        mono=np.zeros(n_monomials), L=np.zeros(N_MUS), G=G_flat.reshape(N_MUS, 9), G_flat=G_flat,
        force=np.zeros(N_MUS), dF4=np.zeros(N_MUS), g=np.zeros(N_MUS),
        g_s=np.zeros(N_MUS), g_sd=np.zeros(N_MUS), g_a=np.zeros(N_MUS), g_s_a=np.zeros(N_MUS),
        g_sd_a=np.zeros(N_MUS), tau=np.zeros(N_DOF),
        dtau_dq=np.zeros((N_DOF, N_DOF)), C=np.zeros((N_MUS, 9)), hess_flat=np.zeros(N_DOF * N_DOF),
        hess_chunk=np.zeros(n_hess_chunks),
    )


@kernel
def fill_monomials(A, q, mono):
    """mono[m] = prod_j q_j ** e_mj for every monomial of the model's polynomials (one product each)."""
    mono[0] = 1.0
    for m in range(1, mono.shape[0]):
        mono[m] = mono[A.mono_parent[m]] * q[A.mono_dof[m]]


@kernel
def chunk_value(coef, mono_index, mono, k):
    """sum_j coef[k, j] * mono[mono_index[k, j]]: chunk k of a polynomial row (see POLY_CHUNK)."""
    acc = 0.0
    for j in range(POLY_CHUNK):
        acc += coef[k, j] * mono[mono_index[k, j]]
    return acc


@kernel
def chunk_sums(target, coef, mono_index, mono, out):
    """out[target[k]] += chunk k, over every chunk k."""
    for k in range(target.shape[0]):
        out[target[k]] += chunk_value(coef, mono_index, mono, k)


@kernel
def contraction(P, L, s, sd, a):
    """Contraction residual of one muscle; P = its row of ModelArrays.mus, whose MUS_KIND selects the
    DAS3 Hill model or Thelen 2003 (``sim.das3.kernels.thelen``).

    Returns (g, dg/ds, dg/dsdot, dg/da, F4, dF4/de, d2g/ds da, d2g/dsdot da)."""
    if P[MUS_KIND] == MUSCLE_THELEN2003:
        return thelen_contraction(P, L, s, sd, a)
    return das3_contraction(P, L, s, sd, a)


@kernel
def das3_contraction(P, L, s, sd, a):
    """Hill model of one muscle (spec "Muscle contraction").

    Returns (g, dg/ds, dg/dsdot, dg/da, F4, dF4/de, d2g/ds da, d2g/dsdot da)."""
    lceopt, b = P[MUS_LCEOPT], P[MUS_PENN_B]
    lce = math.sqrt(s * s + b * b)
    cosp = s / lce
    dcosp = b * b / (lce * lce * lce)                      # d cos(p) / ds
    # F1: force-length
    x1 = (lce - 1.0) / FL_WIDTH
    f1 = math.exp(-x1 * x1)
    df1 = -2.0 * x1 / FL_WIDTH * f1                        # dF1/dLce
    # F2: force-velocity of Lcedot = sdot cos(p)
    vmax = P[MUS_VMAX]
    v = sd * cosp
    if v < 0.0:
        den = vmax - v / HILL_A
        f2 = (vmax + v) / den
        df2 = vmax * (1.0 + 1.0 / HILL_A) / (den * den)
    else:
        c3 = vmax * HILL_A * (ECC_FORCE_MAX - 1.0) / (HILL_A + 1.0)
        f2 = (ECC_FORCE_MAX * v + c3) / (v + c3)
        df2 = c3 * (ECC_FORCE_MAX - 1.0) / ((v + c3) * (v + c3))
    # F3: parallel elastic element
    xp = lce - P[MUS_PEESLACK]
    f3 = P[MUS_K1PEE] * xp
    df3 = P[MUS_K1PEE]
    if xp > 0.0:
        f3 += P[MUS_KPEE] * xp * xp
        df3 += 2.0 * P[MUS_KPEE] * xp
    # F4: series elastic element, elongation in metres
    e = L - s * lceopt - P[MUS_SEESLACK]
    f4 = P[MUS_K1SEE] * e
    df4 = P[MUS_K1SEE]
    if e > 0.0:
        f4 += P[MUS_KSEE] * e * e
        df4 += 2.0 * P[MUS_KSEE] * e
    act = a * f1 * f2 + f3
    g = f4 - act * cosp - SDOT_DAMPING * sd
    dfl_ds = df1 * cosp * f2 + f1 * df2 * sd * dcosp      # d(F1 F2)/ds
    dact_ds = a * dfl_ds + df3 * cosp
    g_s = -lceopt * df4 - dact_ds * cosp - act * dcosp
    g_sd = -a * f1 * df2 * cosp * cosp - SDOT_DAMPING
    g_a = -f1 * f2 * cosp
    g_s_a = -dfl_ds * cosp - f1 * f2 * dcosp
    g_sd_a = -f1 * df2 * cosp * cosp
    return g, g_s, g_sd, g_a, f4, df4, g_s_a, g_sd_a


@kernel
def solve_contraction(P, L, a, s0, ds_dv, sd0, dsd_dv, v, tol, max_iter):
    """Solve g(L, s, sdot, a) = 0 along the line s = s0 + ds_dv v, sdot = sd0 + dsd_dv v for v, from v.

    Newton inside a bracket that every evaluation narrows (bisecting whenever Newton would leave it).
    g decreases along the line for both uses (v = sdot at fixed s; v = s_{n+1} of an implicit Euler
    step, sdot = (s - s_n)/h): dg/dsdot < 0 always and dg/ds is dominated by the SEE stiffness.
    Returns (v, converged)."""
    lo, hi = -np.inf, np.inf
    for _ in range(max_iter):
        g, g_s, g_sd = contraction(P, L, s0 + ds_dv * v, sd0 + dsd_dv * v, a)[:3]
        if abs(g) <= tol:
            return v, True
        if g > 0.0:
            lo = v
        else:
            hi = v
        slope = g_s * ds_dv + g_sd * dsd_dv
        nxt = v - g / slope if slope < 0.0 else np.nan
        if not (lo < nxt < hi):
            if math.isfinite(lo) and math.isfinite(hi):
                nxt = 0.5 * (lo + hi)
            elif math.isfinite(lo):
                nxt = lo + 2.0 * (abs(lo) + 1.0)
            else:
                nxt = hi - 2.0 * (abs(hi) + 1.0)
        if nxt == v:
            return v, True
        v = nxt
    return v, False


@kernel
def muscle_eval(A, q, s, sd, a, W):
    """Fill W with lengths, forces, contraction residuals, muscle moments and their derivatives:
    tau = -sum_i F_i dL_i/dq and, in W.dtau_dq, the path-curvature part of dtau/dq, -sum_i F_i d2L_i/dq2.
    The tendon-stiffness part, -sum_i Fmax dF4_i dL_i/dq dL_i/dq^T, is added by :func:`add_tendon_stiffness`
    (the Rosenbrock step folds it into its own per-muscle elimination instead)."""
    muscle_paths(A, q, W)
    muscle_forces(A, s, sd, a, W)


@kernel
def muscle_paths(A, q, W):
    """The part of :func:`muscle_eval` that depends on q alone: path lengths L, their gradients G and the chunks
    of their Hessians (weighted by the forces in :func:`_add_path_curvature`)."""
    fill_monomials(A, q, W.mono)
    W.L[:] = 0.0
    chunk_sums(A.len_target, A.len_coef, A.len_mono, W.mono, W.L)
    W.G_flat[:] = 0.0
    chunk_sums(A.grad_target, A.grad_coef, A.grad_mono, W.mono, W.G_flat)
    for k in range(A.hess_entry.shape[0]):
        W.hess_chunk[k] = chunk_value(A.hess_coef, A.hess_mono, W.mono, k)


@kernel
def muscle_forces(A, s, sd, a, W):
    """The rest of :func:`muscle_eval`, on the paths in W: forces, residuals, moments and their derivatives."""
    for i in range(N_MUS):
        _muscle_forces(A, i, s[i], sd[i], a[i], W)
    _add_moments(A, W)
    _add_path_curvature(A, W)


@kernel
def refresh_muscle_forces(A, s, sd, a, muscles, n, W):
    """:func:`muscle_forces` after the fibre states (s, sdot) of ``muscles[:n]`` alone changed at the same q and a:
    those muscles' contraction terms again, then the sums over all muscles (moments, path curvature) from every
    muscle's stored force; bit for bit the whole evaluation, as the other muscles' terms are unchanged."""
    for j in range(n):
        i = muscles[j]
        _muscle_forces(A, i, s[i], sd[i], a[i], W)
    _add_moments(A, W)
    _add_path_curvature(A, W)


@kernel
def _muscle_forces(A, i, s, sd, a, W):
    """Muscle i's contraction residual, force and dtau/ds (C)."""
    P = A.mus[i]
    nd = A.mus_ndof[i]
    g, g_s, g_sd, g_a, f4, df4, g_s_a, g_sd_a = contraction(P, W.L[i], s, sd, a)
    W.g[i], W.g_s[i], W.g_sd[i], W.g_a[i] = g, g_s, g_sd, g_a
    W.g_s_a[i], W.g_sd_a[i] = g_s_a, g_sd_a
    fmax = P[MUS_FMAX]
    W.force[i] = fmax * f4
    W.dF4[i] = df4
    dFdL = fmax * df4
    G, C = W.G[i], W.C[i]
    for k in range(nd):
        C[k] = dFdL * P[MUS_LCEOPT] * G[k]


@kernel
def _add_moments(A, W):
    """tau = -sum_i F_i dL_i/dq, in the order of the muscles."""
    W.tau[:] = 0.0
    for i in range(N_MUS):
        F, lo, G = W.force[i], A.mus_dofs[i, 0], W.G[i]
        for k in range(A.mus_ndof[i]):
            W.tau[lo + k] -= G[k] * F


@kernel
def add_tendon_stiffness(A, W, Aq):
    """Aq -= sum_i Fmax dF4_i G_i G_i^T: the moments' dependence on q through the tendon force at fixed s."""
    for i in range(N_MUS):
        dFdL = A.mus[i, MUS_FMAX] * W.dF4[i]
        nd, lo, G = A.mus_ndof[i], A.mus_dofs[i, 0], W.G[i]
        for k in range(nd):
            Aq_row = Aq[lo + k]
            for m in range(nd):
                Aq_row[lo + m] -= dFdL * G[k] * G[m]


@kernel
def _add_path_curvature(A, W):
    """dtau/dq <- -sum_i F_i d2L_i/dq2, accumulated on the upper triangle (a <= b) and mirrored."""
    H = W.hess_flat
    H[:] = 0.0
    for k in range(A.hess_entry.shape[0]):
        H[A.hess_entry[k]] += W.force[A.hess_muscle[k]] * W.hess_chunk[k]
    for a in range(N_DOF):
        for b in range(a, N_DOF):
            h = H[a * N_DOF + b]
            W.dtau_dq[a, b] = -h
            W.dtau_dq[b, a] = -h


@kernel
def activation_gain(P, u, a):
    """(c1, c2) of da/dt = (u - a)(c1 u + c2): the rising pair while u >= a, the falling pair below
    (equal in DAS3, paper eq. 1; 1/tau_act and 1/tau_deact with c1 = 0 in Thelen 2003)."""
    if u >= a:
        return P[MUS_C1], P[MUS_C2]
    return P[MUS_C1_FALL], P[MUS_C2_FALL]


@kernel
def activation_rates(A, u, a, out_rate, out_da, out_du):
    """da/dt = (u - a)(c1 u + c2) (paper eq. 1) and its partial derivatives."""
    for i in range(N_MUS):
        c1, c2 = activation_gain(A.mus[i], u[i], a[i])
        k = c1 * u[i] + c2
        out_rate[i] = (u[i] - a[i]) * k
        out_da[i] = -k
        out_du[i] = k + (u[i] - a[i]) * c1


@kernel
def solve_rest_lengths(A, L, a, s, s_min, tol, max_iter):
    """Every muscle's s with g(L, s, 0, a) = 0 at rest (sdot = 0), in place from the given s, by the
    bracketed Newton of :func:`solve_contraction` along s. A muscle whose tendon stays slack down to
    ``s_min`` (no rest length in the model's range) is left at ``s_min`` with g != 0. Returns the number
    of such muscles."""
    failed = 0
    for i in range(N_MUS):
        v, ok = solve_contraction(A.mus[i], L[i], a[i], 0.0, 1.0, 0.0, 0.0, s[i], tol, max_iter)
        if not ok or v < s_min:
            v = max(v, s_min)
            failed += 1
        s[i] = v
    return failed


@kernel
def see_extension(k1, k2, f4):
    """(e, de/dF4, d2e/dF4^2): the SEE extension that carries F4 = k1 e + kSEE e^2 (e > 0) or k1 e (e <= 0)."""
    if f4 <= 0.0:
        return f4 / k1, 1.0 / k1, 0.0
    e = 2.0 * f4 / (k1 + math.sqrt(k1 * k1 + 4.0 * k2 * f4))
    e1 = 1.0 / (k1 + 2.0 * k2 * e)
    return e, e1, -2.0 * k2 * e1 ** 3


@kernel
def rest_state_from_force(A, L, F, s, a):
    """The rest (sdot = 0) contraction state and activation of every muscle that carries force F_i at
    length L_i. DAS3: invert the SEE, F4 = F/Fmax = k1 e + kSEE e^2 (e > 0) or k1 e, for e; then
    s = (L - SEEslack - e) / Lceopt, and a from g = 0 with F2 = 1: a = (F4 / cos p - F3) / F1.
    Thelen 2003 elements: ``sim.das3.kernels.thelen.thelen_rest_state``."""
    for i in range(N_MUS):
        P = A.mus[i]
        f4 = F[i] / P[MUS_FMAX]
        if P[MUS_KIND] == MUSCLE_THELEN2003:
            s[i], a[i] = thelen_rest_state(P, L[i], f4)
            continue
        e = see_extension(P[MUS_K1SEE], P[MUS_KSEE], f4)[0]
        si = (L[i] - P[MUS_SEESLACK] - e) / P[MUS_LCEOPT]
        b = P[MUS_PENN_B]
        lce = math.sqrt(si * si + b * b)
        x1 = (lce - 1.0) / FL_WIDTH
        xp = lce - P[MUS_PEESLACK]
        f3 = P[MUS_K1PEE] * xp
        if xp > 0.0:
            f3 += P[MUS_KPEE] * xp * xp
        s[i] = si
        a[i] = (f4 * lce / si - f3) / math.exp(-x1 * x1)


@kernel
def rest_activation_curve(P, L, F):
    """(a, da/dF, d2a/dF2) of one DAS3 muscle (parameter row P) at rest with force F (N) at length L: the a of
    :func:`rest_state_from_force` (the same expression, so the same value) and its first two derivatives along
    F at fixed L, a = N E with N = F4 lce/s - F3(lce), E = 1/exp(-x^2), x = (lce - 1)/FL_WIDTH, lce = sqrt(s^2 + b^2),
    s = (L - SEEslack - e(F4))/Lceopt."""
    fmax, lceopt, b = P[MUS_FMAX], P[MUS_LCEOPT], P[MUS_PENN_B]
    f4 = F / fmax
    e, e1, e2 = see_extension(P[MUS_K1SEE], P[MUS_KSEE], f4)
    s = (L - P[MUS_SEESLACK] - e) / lceopt
    s1, s2 = -e1 / lceopt, -e2 / lceopt
    lce = math.sqrt(s * s + b * b)
    l1 = s / lce * s1
    l2 = b * b / lce ** 3 * s1 * s1 + s / lce * s2
    u = lce / s
    u1 = l1 / s - lce * s1 / (s * s)
    u2 = l2 / s - 2.0 * l1 * s1 / (s * s) - lce * s2 / (s * s) + 2.0 * lce * s1 * s1 / s ** 3
    xp = lce - P[MUS_PEESLACK]
    f3, df3, ddf3 = P[MUS_K1PEE] * xp, P[MUS_K1PEE], 0.0
    if xp > 0.0:
        f3 += P[MUS_KPEE] * xp * xp
        df3 += 2.0 * P[MUS_KPEE] * xp
        ddf3 = 2.0 * P[MUS_KPEE]
    n1, n2 = u + f4 * u1 - df3 * l1, 2.0 * u1 + f4 * u2 - ddf3 * l1 * l1 - df3 * l2
    x1 = (lce - 1.0) / FL_WIDTH
    E = 1.0 / math.exp(-x1 * x1)
    g1 = 2.0 * x1 * l1 / FL_WIDTH
    E1, E2 = g1 * E, E * (g1 * g1 + 2.0 * l1 * l1 / FL_WIDTH ** 2 + 2.0 * x1 * l2 / FL_WIDTH)
    num = f4 * lce / s - f3
    a = num / math.exp(-x1 * x1)
    return a, (n1 * E + num * E1) / fmax, (n2 * E + 2.0 * n1 * E1 + num * E2) / (fmax * fmax)
