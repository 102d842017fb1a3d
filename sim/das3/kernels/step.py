"""Residual, Jacobian pieces, outputs and the structured first-order Rosenbrock step (numba kernels).

The implicit model is f(x, xdot, u) = 0 with x = [q, qdot, s, a] (spec "State, inputs, residual").
:func:`evaluate` fills the residual and the *structured* Jacobian pieces:

    d f_eom / dq    = Aq  (11x11)        d f_eom / dqdot = Av (11x11)     d f_eom / dqdd = -M
    d f_eom / ds_i  = C_i (on muscle i's DOFs)
    d g_i / dq      = dF4_i * dL_i/dq    d g_i / ds_i, d g_i / dsdot_i, d g_i / da_i   (scalars)
    d h_i / da_i    = -rate_da_i         d h_i / dadot_i = 1      d h_i / du_i = -rate_du_i

:func:`rosenbrock_step` applies paper eq. 8,
    dx = (df/dx + df/dxdot / h)^-1 (df/dxdot xdot_n - f(x_n, xdot_n, u_n) - df/du (u_{n+1} - u_n)),
by eliminating the diagonal activation rows, then the scalar contraction row of each muscle, leaving one
dense 11x11 system in dq (dqdot = r_q + dq / h); it never forms the 298x298 matrix. The step itself uses
:func:`evaluate_step`, which leaves the tendon-stiffness part of Aq to that elimination.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from sim.das3.kernels.dual import slot_q
from sim.das3.kernels.multibody import MultibodyWork, multibody_eval, new_multibody_work
from sim.das3.kernels.muscles import (
    MuscleWork,
    activation_gain,
    activation_rates,
    add_tendon_stiffness,
    muscle_forces,
    muscle_paths,
    new_muscle_work,
    refresh_muscle_forces,
    solve_contraction,
)
from sim.das3.kernels.outputs import OutputWork, compute_outputs, new_output_work
from sim.das3.kernels.reflex import ReflexWork, add_reflex, new_reflex_work, record_velocity
from sim.das3.layout import FIBRE_MIN, MUS_EXCITATION_GATE, MUS_FMAX, N_DOF, N_MUS, N_STATES
from sim.jit.bundle import borrowed_items
from sim.jit.kernel import entry, kernel

IQ, IQD, IS, IA = 0, N_DOF, 2 * N_DOF, 2 * N_DOF + N_MUS  # state block offsets

SCHEME_PAPER = 0      # paper eq. 8 exactly (Jacobian at x_n, u_n; df/du (u_{n+1} - u_n))
SCHEME_ACTIVATION = 1  # default: eq. 8 with the activation rows taken implicitly at u_{n+1} and the
                       # contraction rows linearised at that new activation (see rosenbrock_solve)

STEP_OK = 0
STEP_NONFINITE = 1
STEP_RESIDUAL = 2
STEP_SINGULAR = 3
STEP_BAD_INPUT = 4
STEP_FIBRE_COLLAPSE = 5
STEP_MESSAGES = {
    STEP_FIBRE_COLLAPSE: (f"a muscle fibre collapsed (s < {FIBRE_MIN} L_CEopt): the Hill model is singular "
                          "at zero fibre length, so this excitation/posture is outside the DAS3 model's "
                          "validity (the variable-step reference fails there too)"),
    STEP_NONFINITE: "the state became non-finite",
    STEP_RESIDUAL: "the dynamics residual blew up",
    STEP_SINGULAR: "the Rosenbrock iteration matrix became singular",
}


class StepWork(NamedTuple):
    f: np.ndarray        # (298,) residual at the last evaluation
    rate: np.ndarray     # (138,) da/dt
    rate_da: np.ndarray  # (138,)
    rate_du: np.ndarray  # (138,)
    Aq: np.ndarray       # (11, 11) d f_eom / dq
    Av: np.ndarray       # (11, 11) d f_eom / dqdot
    K: np.ndarray        # (11, 11) reduced system
    kb: np.ndarray       # (11,)
    piv: np.ndarray      # (11,) int
    dx: np.ndarray       # (298,)
    wsol: np.ndarray     # (138,) per-muscle particular solution of the contraction rows
    dden: np.ndarray     # (138,) per-muscle pivot d_i = dg/ds + dg/dsdot / h
    rq: np.ndarray       # (11,)
    B: np.ndarray        # (11, 11)
    u_next: np.ndarray   # (138,) validated, clipped excitation of the step being taken
    failed_muscle: np.ndarray  # (1,) int: the muscle of the last STEP_FIBRE_COLLAPSE
    corrected: np.ndarray  # (138,) int: the muscles the last :func:`correct_contraction` corrected, in its
                           # first n entries (n: what it returned)
    x_prev: np.ndarray   # (298,) state before the step (restored on failure)
    xd_prev: np.ndarray  # (298,)


class PlantWork(NamedTuple):
    """The per-run ``Data`` workspace: everything a step writes. One per plant; never shared."""

    mb: MultibodyWork
    mu: MuscleWork
    st: StepWork
    out: OutputWork
    rx: ReflexWork


def new_plant_work(A, step_s: float | None = None) -> PlantWork:
    """The workspace of model arrays ``A`` (``step_s``: the plant's step, for the reflex delays; None where
    nothing steps)."""
    st = StepWork(
        f=np.zeros(N_STATES), rate=np.zeros(N_MUS), rate_da=np.zeros(N_MUS), rate_du=np.zeros(N_MUS),
        Aq=np.zeros((N_DOF, N_DOF)), Av=np.zeros((N_DOF, N_DOF)), K=np.zeros((N_DOF, N_DOF)),
        kb=np.zeros(N_DOF), piv=np.zeros(N_DOF, np.int64), dx=np.zeros(N_STATES), wsol=np.zeros(N_MUS),
        dden=np.zeros(N_MUS), rq=np.zeros(N_DOF), B=np.zeros((N_DOF, N_DOF)),
        u_next=np.zeros(N_MUS), failed_muscle=np.zeros(1, np.int64), corrected=np.zeros(N_MUS, np.int64), x_prev=np.zeros(N_STATES), xd_prev=np.zeros(N_STATES),
    )
    out = new_output_work(A)
    return PlantWork(mb=new_multibody_work(), mu=new_muscle_work(A.mono_parent.shape[0], A.hess_entry.shape[0]), st=st, out=out,
                     rx=new_reflex_work(A, step_s))


@kernel
def evaluate_step(A, x, xd, u, loads, W):
    """Residual f(x, xdot, u) into W.st.f and the Jacobian pieces into W, with W.st.Aq lacking the muscles'
    tendon stiffness (:func:`sim.das3.kernels.muscles.add_tendon_stiffness`): what :func:`rosenbrock_solve` takes."""
    q, qd, a = x[IQ:IQD], x[IQD:IS], x[IA:]
    st = W.st
    multibody_eval(A, q, qd, xd[IQD:IS], loads, W.mb)
    activation_rates(A, u, a, st.rate, st.rate_da, st.rate_du)
    muscle_paths(A, q, W.mu)
    muscle_forces(A, x[IS:IA], xd[IS:IA], a, W.mu)
    assemble_residual(x, xd, W)


@kernel
def assemble_residual(x, xd, W):
    """The residual f and the Jacobian pieces Aq, Av from the multibody terms, activation rates and muscle terms
    in W."""
    qd, ad = x[IQD:IS], xd[IA:]
    mb, mu, st = W.mb, W.mu, W.st
    f = st.f
    for j in range(N_DOF):
        f[IQ + j] = qd[j] - xd[IQ + j]
        f[IQD + j] = mb.Q[j, 0] + mu.tau[j]
        for i in range(N_DOF):
            st.Aq[j, i] = mb.Q[j, slot_q(i)] + mu.dtau_dq[j, i]
            st.Av[j, i] = mb.Av[j, i]
    for i in range(N_MUS):
        f[IS + i] = mu.g[i]
        f[IA + i] = ad[i] - st.rate[i]


@kernel
def evaluate_corrected(A, x, xd, n, W):
    """:func:`evaluate_step` again after :func:`correct_contraction` changed the fibre states (s, sdot) of its
    ``n`` muscles (W.st.corrected) only: the multibody terms, activation rates and muscle paths stand, as none
    depends on s, and so do the other muscles' terms (:func:`refresh_muscle_forces`); bit for bit the whole."""
    refresh_muscle_forces(A, x[IS:IA], xd[IS:IA], x[IA:], W.st.corrected, n, W.mu)
    assemble_residual(x, xd, W)


@kernel
def evaluate(A, x, xd, u, loads, W):
    """Residual f(x, xdot, u) into W.st.f and all Jacobian pieces into W (see module docstring)."""
    evaluate_step(A, x, xd, u, loads, W)
    add_tendon_stiffness(A, W.mu, W.st.Aq)


@kernel
def _lu_solve_inplace(K, b, piv):
    """Solve K y = b (small dense) by Gaussian elimination with partial pivoting; y -> b. K is destroyed.

    Returns False if a pivot is zero or not finite."""
    n = K.shape[0]
    for c in range(n):
        p = c
        best = abs(K[c, c])
        for r in range(c + 1, n):
            v = abs(K[r, c])
            if v > best:
                best, p = v, r
        if not (best > 0.0) or not math.isfinite(best):
            return False
        piv[c] = p
        if p != c:
            for k in range(n):
                K[c, k], K[p, k] = K[p, k], K[c, k]
            b[c], b[p] = b[p], b[c]
        inv = 1.0 / K[c, c]
        for r in range(c + 1, n):
            fac = K[r, c] * inv
            if fac != 0.0:
                for k in range(c + 1, n):
                    K[r, k] -= fac * K[c, k]
                b[r] -= fac * b[c]
    for c in range(n - 1, -1, -1):
        acc = b[c]
        for k in range(c + 1, n):
            acc -= K[c, k] * b[k]
        b[c] = acc / K[c, c]
    return True


@kernel
def muscle_pivots(A, x, xd, u0, u1, h, scheme, W):
    """The activation step da (into W.st.dx) and each contraction row's pivot d = dg/ds + dg/dsdot / h
    (W.st.dden) and particular solution w = (dg/dsdot sdot - g - dg/da da) / d (W.st.wsol) of
    :func:`rosenbrock_solve`, as loops over the muscles' arrays that the compiler vectorises."""
    mu, st = W.mu, W.st
    f_act, f_con, da = st.f[IA:], st.f[IS:IA], st.dx[IA:]
    sd, ad, a = xd[IS:IA], xd[IA:], x[IA:]
    inv_h = 1.0 / h
    if scheme == SCHEME_PAPER:
        for i in range(N_MUS):
            rh = ad[i] - f_act[i] + st.rate_du[i] * (u1[i] - u0[i])
            da[i] = rh / (-st.rate_da[i] + inv_h)
        for i in range(N_MUS):
            st.dden[i] = mu.g_s[i] + mu.g_sd[i] * inv_h
        for i in range(N_MUS):
            st.wsol[i] = ((mu.g_sd[i] * sd[i] - f_con[i]) - mu.g_a[i] * da[i]) / st.dden[i]
        return
    for i in range(N_MUS):
        c1, c2 = activation_gain(A.mus[i], u1[i], a[i])
        kact = c1 * u1[i] + c2
        da[i] = (a[i] + h * u1[i] * kact) / (1.0 + h * kact) - a[i]
    g_s, g_s_a, g_sd, g_sd_a = mu.g_s, mu.g_s_a, mu.g_sd, mu.g_sd_a
    for i in range(N_MUS):
        st.dden[i] = (g_s[i] + g_s_a[i] * da[i]) + (g_sd[i] + g_sd_a[i] * da[i]) * inv_h
    for i in range(N_MUS):
        st.wsol[i] = (((g_sd[i] + g_sd_a[i] * da[i]) * sd[i] - f_con[i]) - mu.g_a[i] * da[i]) / st.dden[i]


@kernel
def rosenbrock_solve(A, x, xd, u0, u1, h, scheme, W):
    """dx of paper eq. 8 from the pieces of the last :func:`evaluate_step` at (x, xd, u0); result in W.st.dx.
    Each muscle's tendon stiffness Fmax dF4 G G^T (left out of Aq) is added to the reduced matrix together
    with the elimination of its contraction row, which has the same G G^T shape: one pass per muscle.

    ``scheme`` SCHEME_PAPER is eq. 8 as published. SCHEME_ACTIVATION differs in the muscle rows only:
    (1) the activation rows, which are decoupled and affine in a, are solved exactly for the implicit
    Euler step at u_{n+1}: a_{n+1} = (a_n + h u k) / (1 + h k), k = c1 u_{n+1} + c2 (eq. 8 linearises
    in u around u_n, which at an excitation step from 0 under-predicts the rise by the factor
    Tact/Tdeact); (2) each contraction row uses dg/ds and dg/dsdot at that new activation (g is affine in
    a, so they are exact there). At a = 0 the force-velocity term drops out of dg/dsdot, and eq. 8 then
    lets a fibre whose activation jumps shorten many times faster than Vmax within one step: abrupt
    excitation of one muscle group (e.g. the clavicular deltoid 0 -> 1, an ordinary FES onset) makes the
    published scheme diverge at h = 1-4 ms while the reference solution stays smooth. Both variants are
    first-order linearly implicit (W-)methods with the same 11x11 structure.

    Returns STEP_OK or STEP_SINGULAR."""
    mb, mu, st = W.mb, W.mu, W.st
    f, dx = st.f, st.dx
    qdd = xd[IQD:IS]
    inv_h = 1.0 / h
    M, K, kb, B, rq = mb.M, st.K, st.kb, st.B, st.rq
    # q rows:  -dq/h + dqdot = r_q,   r_q = -xdot_q - f_q
    # B = Av - M/h ; K = Aq + B/h ; kb = r_e - B r_q with r_e = -M qdd - f_eom
    for j in range(N_DOF):
        rq[j] = -xd[IQ + j] - f[IQ + j]
        kb[j] = -f[IQD + j]
    for i in range(N_DOF):      # every kb[j] subtracts M[j, i] qdd[i] in the order of i, all j at once
        qdd_i = qdd[i]
        for j in range(N_DOF):
            kb[j] -= M[j, i] * qdd_i
    for j in range(N_DOF):
        acc = 0.0
        for i in range(N_DOF):
            B[j, i] = st.Av[j, i] - M[j, i] * inv_h
            K[j, i] = st.Aq[j, i] + B[j, i] * inv_h
            acc += B[j, i] * rq[i]
        kb[j] -= acc
    muscle_pivots(A, x, xd, u0, u1, h, scheme, W)
    # each muscle's contraction row eliminated into K, kb, on its DOFs (a contiguous range from lo)
    for i in range(N_MUS):
        w, nd, lo = st.wsol[i], A.mus_ndof[i], A.mus_dofs[i, 0]
        fac = mu.dF4[i] / st.dden[i]
        stiff = A.mus[i, MUS_FMAX] * mu.dF4[i]
        G, C = mu.G[i], mu.C[i]
        for k in range(nd):
            ck = C[k]
            kb[lo + k] -= ck * w
            row = stiff * G[k] + ck * fac
            K_row = K[lo + k]
            for m in range(nd):
                K_row[lo + m] -= row * G[m]
    if not _lu_solve_inplace(K, kb, st.piv):
        return STEP_SINGULAR
    for j in range(N_DOF):
        dq = kb[j]
        dx[IQ + j] = dq
        dx[IQD + j] = rq[j] + dq * inv_h
    for i in range(N_MUS):
        acc, lo, G = 0.0, A.mus_dofs[i, 0], mu.G[i]
        for k in range(A.mus_ndof[i]):
            acc += G[k] * kb[lo + k]
        dx[IS + i] = st.wsol[i] - mu.dF4[i] * acc / st.dden[i]
    return STEP_OK


@kernel
def copy_into(dst, src):
    """dst[:] = src element by element (numba's slice assignment may allocate a temporary copy)."""
    for i in range(dst.shape[0]):
        dst[i] = src[i]


@kernel
def apply_step(x, xd, dx, h):
    """x <- x + dx, xdot <- dx / h if everything is finite (returns False and leaves x alone if not)."""
    for k in range(dx.shape[0]):
        if not math.isfinite(dx[k]):
            return False
    inv_h = 1.0 / h
    for k in range(dx.shape[0]):
        x[k] += dx[k]
        xd[k] = dx[k] * inv_h
    return True


@kernel
def residual_max(f):
    m = 0.0
    for k in range(f.shape[0]):
        v = abs(f[k])
        if not (v <= m):  # also catches NaN
            m = v
    return m


CONTRACTION_TOL = 1e-3   # |g| (units of Fmax) above which a fibre state is corrected after the step


@kernel
def correct_contraction(A, x, xd, h, W):
    """Implicit-Euler correction of the fibre states the linear step got wrong (SCHEME_ACTIVATION).

    Each contraction row involves only q, its own s, sdot, a. Where the residual after the step,
    g_i(q_{n+1}, s_{n+1}, (s_{n+1} - s_n)/h, a_{n+1}), exceeds CONTRACTION_TOL (a tendon crossing from
    slack to taut within a step: the SEE stiffness jumps from ~0 to kSEE e, and the linearisation
    overshoots into a growing period-2 oscillation), s_i is solved from that scalar equation exactly.
    Returns the number of corrected muscles, listed in W.st.corrected (the caller re-evaluates them,
    :func:`evaluate_corrected`)."""
    mu, st = W.mu, W.st
    inv_h = 1.0 / h
    n = 0
    for i in range(N_MUS):
        if abs(mu.g[i]) > CONTRACTION_TOL:
            s_prev = st.x_prev[IS + i]
            s_new, ok = solve_contraction(A.mus[i], mu.L[i], x[IA + i], 0.0, 1.0, -s_prev * inv_h, inv_h,
                                          x[IS + i], 1e-12, 50)
            if ok:
                x[IS + i] = s_new
                xd[IS + i] = (s_new - s_prev) * inv_h
                st.corrected[n] = i
                n += 1
    return n


@kernel
def plant_step(A, x, xd, u0, u1, loads, h, residual_limit, scheme, W):
    """One fixed step from an up-to-date evaluation at (x, xd, u0): solve, update, re-evaluate at the new
    state with u1 (ready for the next step) and compute the outputs. Returns a STEP_* status; on failure
    x and xd are left unchanged."""
    status = rosenbrock_solve(A, x, xd, u0, u1, h, scheme, W)
    if status != STEP_OK:
        return status
    st = W.st
    copy_into(st.x_prev, x)
    copy_into(st.xd_prev, xd)
    if not apply_step(x, xd, st.dx, h):
        return STEP_NONFINITE
    evaluate_step(A, x, xd, u1, loads, W)
    if scheme == SCHEME_ACTIVATION:
        n_corrected = correct_contraction(A, x, xd, h, W)
        if n_corrected:
            evaluate_corrected(A, x, xd, n_corrected, W)
    r = residual_max(st.f)
    status = STEP_OK
    if not math.isfinite(r):
        status = STEP_NONFINITE
    elif r > residual_limit:
        status = STEP_RESIDUAL
    else:
        for i in range(N_MUS):
            if x[IS + i] < FIBRE_MIN:
                st.failed_muscle[0] = i
                status = STEP_FIBRE_COLLAPSE
                break
    if status != STEP_OK:
        # keep the last good state and make every output describe it again
        copy_into(x, st.x_prev)
        copy_into(xd, st.xd_prev)
        evaluate_step(A, x, xd, u0, loads, W)
        compute_outputs(A, W)
        return status
    compute_outputs(A, W)
    return STEP_OK


@kernel
def clip_excitation(u_in, u_out):
    """u_out <- clip(u_in, 0, 1). Returns the number of clipped values, or -1 (u_out untouched) if any
    value is NaN or infinite."""
    for i in range(u_in.shape[0]):
        if not math.isfinite(u_in[i]):
            return -1
    n = 0
    for i in range(u_in.shape[0]):
        v = u_in[i]
        if v < 0.0:
            v = 0.0
            n += 1
        elif v > 1.0:
            v = 1.0
            n += 1
        u_out[i] = v
    return n


@kernel
def gate_excitation(A, u):
    """u_i <- u_i * MUS_EXCITATION_GATE of muscle i, in place (1.0 leaves u bit for bit)."""
    for i in range(u.shape[0]):
        u[i] *= A.mus[i, MUS_EXCITATION_GATE]


@kernel
def prime(bundle, x, xd, u0, loads):
    """Evaluate at (x, xd, u0) and compute the outputs (after a reset or a change of loads); returns the
    largest residual."""
    A, W = borrowed_items(bundle)
    evaluate_step(A, x, xd, u0, loads, W)
    compute_outputs(A, W)
    return residual_max(W.st.f)


@entry
def bundle_prime(bundle, x, xd, u0, loads):
    """:func:`prime` from Python (``sim.jit.bundle``: the entry only passes the bundle on)."""
    return prime(bundle, x, xd, u0, loads)


@kernel
def plant_steps(A, W, x, xd, u0, u_in, loads, h, residual_limit, scheme, stale, n):
    """``n`` steps holding u_in (zero-order hold): validate/clip u_in, gate it (u_i <- g_i u_i with g_i =
    MUS_EXCITATION_GATE: 0 on a denervated element, whatever drives it), (re-)evaluate first if stale, then
    Rosenbrock steps until one fails, a spastic element's stretch reflex added before each step and its
    velocity recorded after it (:mod:`sim.das3.kernels.reflex`). Returns (status, excitations clipped over the
    steps done, steps done). After each good step u0 <- the applied (clipped, gated) excitation."""
    n_clipped = clip_excitation(u_in, W.st.u_next)
    if n_clipped < 0:
        return STEP_BAD_INPUT, 0, 0
    gate_excitation(A, W.st.u_next)
    spastic = W.rx.idx.shape[0] > 0
    if spastic:
        copy_into(W.rx.u_base, W.st.u_next)
    if stale:
        evaluate_step(A, x, xd, u0, loads, W)
    for k in range(n):
        if spastic:
            add_reflex(A, W.rx, W.st.u_next)
        status = plant_step(A, x, xd, u0, W.st.u_next, loads, h, residual_limit, scheme, W)
        if status != STEP_OK:
            return status, k * n_clipped, k
        if spastic:
            record_velocity(A, W.rx, W.mu.G, x)
        copy_into(u0, W.st.u_next)
    return STEP_OK, n * n_clipped, n


@kernel
def one_step(bundle, x, xd, u0, u_in, loads, h, residual_limit, scheme, stale):
    """:func:`plant_steps` with n = 1 on the bundle's model and workspace: (status, n_clipped)."""
    A, W = borrowed_items(bundle)
    status, n_clipped, _ = plant_steps(A, W, x, xd, u0, u_in, loads, h, residual_limit, scheme, stale, 1)
    return status, n_clipped


@entry
def bundle_step(bundle, x, xd, u0, u_in, loads, h, residual_limit, scheme, stale):
    """Real-time entry point for one step, :func:`one_step` from Python: (status, n_clipped)."""
    return one_step(bundle, x, xd, u0, u_in, loads, h, residual_limit, scheme, stale)
