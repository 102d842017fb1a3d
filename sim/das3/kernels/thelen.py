"""Thelen 2003 muscle (OpenSim ``Thelen2003Muscle``) in the DAS3 contraction form.

Curves from C. T. John, "Complete Description of the Thelen2003Muscle Model" (the equations the OpenSim
source implements), all normalised by F_0^M = Fmax and l_0^M = L_CEopt:

    tendon   FT(eps)  = 0.001 (1 + eps) + { k_lin (eps - eps_toe) + F_toe            eps > eps_toe
                                          { F_toe (exp(k_toe eps/eps_toe) - 1)/(exp(k_toe) - 1)   0 < eps <= eps_toe
                                          { 0                                        eps <= 0
    passive  FPE(l)   = 1 + k_PE/eps0M (l - (1 + eps0M))       l > 1 + eps0M,  else exp(k_PE (l - 1)/eps0M)/exp(k_PE)
    active   fl(l)    = exp(-(l - 1)^2 / gamma)
    velocity fv(v)    = (v + 1)/(1 + 1/A_f)                    v < -1
                        (v + 1)/(1 - v/A_f)                    -1 <= v < 0
                        (c v F_len + F_len - 1)/(c v + F_len - 1),  c = 2 + 2/A_f,   0 <= v < v_lin
                        F_len/(20 (F_len - 1)) ((1 + 1/A_f) F_len v/(10 (F_len - 1)) + 18.05 F_len - 18)   v >= v_lin
    with v = fibre velocity / Vmax, Vmax = (5 + 5 a) l_0^M per second, and v_lin where the hyperbola reaches
    0.95 F_len. (The document typesets the last branch with an extra division by (1 + 1/A_f) F_len; the form
    above is the one that is continuous, with a continuous slope, at v_lin and that inverts to the
    document's (F_V)^-1 for f >= 0.95 F_len.)

In the DAS3 state (spec "Muscle contraction") s = l^M cos(alpha) / l_0^M with constant thickness
b = sin(alpha_0), l = sqrt(s^2 + b^2), fibre velocity sdot cos(alpha), and tendon strain
eps = (L - s l_0^M - l_s^T) / l_s^T. The contraction residual keeps the DAS3 form

    g = FT(eps) - (a fl(l) fv(v) + FPE(l)) cos(alpha) - d sdot,   d = SDOT_DAMPING of the DAS3 model,

so the implicit step and the per-muscle elimination are unchanged; the damping term (DAS3's, not
Thelen's) keeps sdot defined when a = 0. Thelen's Vmax makes g nonlinear in a: the second derivatives
d2g/ds da and d2g/dsdot da are returned exactly at the current a.
"""
from __future__ import annotations

import math

from sim.das3.layout import MUS_LCEOPT, MUS_PENN_B, MUS_SEESLACK, SDOT_DAMPING
from sim.jit.kernel import kernel

# Constants shared by all muscles (John, "Complete Description ...", list of constants).
EPS0_M = 0.6                 # passive muscle strain at F_0^M
K_TOE = 3.0                  # tendon exponential shape factor
EPS0_T = 0.033               # tendon strain at F_0^M
K_LIN = 1.712 / EPS0_T       # tendon linear shape factor
EPS_TOE = 0.609 * EPS0_T     # tendon strain where the force becomes linear
F_TOE = 0.333333             # normalised tendon force there
K_PE = 4.0                   # passive force-length shape factor
GAMMA = 0.5                  # active force-length shape factor
A_F = 0.3                    # force-velocity shape factor
F_LEN = 1.8                  # maximum normalised lengthening force
VMAX_REST, VMAX_GAIN = 5.0, 5.0          # Vmax = (5 + 5 a) l_0^M / s
TENDON_FLOOR = 0.001         # the 0.001 (1 + eps) term that keeps the tendon from going fully slack

_C_LEN = 2.0 + 2.0 / A_F
V_LIN = 10.0 * (F_LEN - 1.0) * (0.95 * F_LEN - 1.0) / ((1.0 + 1.0 / A_F) * F_LEN)
_LIN_SLOPE = F_LEN / (20.0 * (F_LEN - 1.0)) * (1.0 + 1.0 / A_F) * F_LEN / (10.0 * (F_LEN - 1.0))
_LIN_OFFSET = F_LEN / (20.0 * (F_LEN - 1.0)) * (18.05 * F_LEN - 18.0)


@kernel
def tendon_force(eps):
    """(FT, dFT/deps)."""
    f, df = TENDON_FLOOR * (1.0 + eps), TENDON_FLOOR
    if eps > EPS_TOE:
        f += K_LIN * (eps - EPS_TOE) + F_TOE
        df += K_LIN
    elif eps > 0.0:
        k = K_TOE / EPS_TOE
        scale = F_TOE / (math.exp(K_TOE) - 1.0)
        e = math.exp(k * eps)
        f += scale * (e - 1.0)
        df += scale * k * e
    return f, df


@kernel
def passive_force(lce):
    """(FPE, dFPE/dl) of the normalised fibre length l."""
    if lce > 1.0 + EPS0_M:
        return 1.0 + K_PE / EPS0_M * (lce - (1.0 + EPS0_M)), K_PE / EPS0_M
    f = math.exp(K_PE * (lce - 1.0) / EPS0_M) / math.exp(K_PE)
    return f, f * K_PE / EPS0_M


@kernel
def active_force_length(lce):
    """(fl, dfl/dl)."""
    x = lce - 1.0
    f = math.exp(-x * x / GAMMA)
    return f, -2.0 * x / GAMMA * f


@kernel
def force_velocity(v):
    """(fv, dfv/dv, d2fv/dv2) of v = fibre velocity / Vmax (> 0 lengthening)."""
    if v < -1.0:
        return (v + 1.0) / (1.0 + 1.0 / A_F), 1.0 / (1.0 + 1.0 / A_F), 0.0
    if v < 0.0:
        d = 1.0 - v / A_F
        return (v + 1.0) / d, (1.0 + 1.0 / A_F) / (d * d), 2.0 * (1.0 + 1.0 / A_F) / (A_F * d * d * d)
    if v < V_LIN:
        den = _C_LEN * v + F_LEN - 1.0
        num = _C_LEN * v * F_LEN + F_LEN - 1.0
        k = _C_LEN * (F_LEN - 1.0) * (F_LEN - 1.0)
        return num / den, k / (den * den), -2.0 * _C_LEN * k / (den * den * den)
    return _LIN_SLOPE * v + _LIN_OFFSET, _LIN_SLOPE, 0.0


@kernel
def thelen_contraction(P, L, s, sd, a):
    """Thelen 2003 contraction residual of one muscle in the DAS3 state; same returns as
    ``sim.das3.kernels.muscles.contraction``: (g, dg/ds, dg/dsdot, dg/da, F4, dF4/de, d2g/ds da, d2g/dsdot da),
    F4 = FT the normalised tendon force and e the tendon elongation in metres."""
    lceopt, b, slack = P[MUS_LCEOPT], P[MUS_PENN_B], P[MUS_SEESLACK]
    lce = math.sqrt(s * s + b * b)
    cosp = s / lce
    dcosp = b * b / (lce * lce * lce)                       # d cos(alpha) / ds
    fl, dfl = active_force_length(lce)
    fpe, dfpe = passive_force(lce)
    vmax = VMAX_REST + VMAX_GAIN * a
    vn = sd * cosp                                          # fibre velocity, l_0^M per second
    v = vn / vmax
    fv, dfv, d2fv = force_velocity(v)
    ft, dft = tendon_force((L - s * lceopt - slack) / slack)
    act = a * fl * fv + fpe
    g = ft - act * cosp - SDOT_DAMPING * sd
    dv_ds, dv_dsd, dv_da = sd * dcosp / vmax, cosp / vmax, -VMAX_GAIN * v / vmax
    dact_ds = a * (dfl * cosp * fv + fl * dfv * dv_ds) + dfpe * cosp
    dact_da = fl * (fv + a * dfv * dv_da)
    g_s = -lceopt * dft / slack - dact_ds * cosp - act * dcosp
    g_sd = -a * fl * dfv * dv_dsd * cosp - SDOT_DAMPING
    g_a = -dact_da * cosp
    # d/da of dact_ds and of a fl dfv dv_dsd (dv_ds, dv_dsd scale with 1/vmax)
    ddv = -VMAX_GAIN / vmax
    d2act_ds_da = (dfl * cosp * (fv + a * dfv * dv_da)
                   + fl * dv_ds * (dfv + a * (d2fv * dv_da + dfv * ddv)))
    g_s_a = -d2act_ds_da * cosp - dact_da * dcosp
    g_sd_a = -fl * dv_dsd * cosp * (dfv + a * (d2fv * dv_da + dfv * ddv))
    return g, g_s, g_sd, g_a, ft, dft / slack, g_s_a, g_sd_a


@kernel
def tendon_strain(f):
    """The strain eps with FT(eps) = f (FT is increasing; in the toe, Newton from eps_toe, which the
    convex toe curve approaches monotonically from above)."""
    if f <= TENDON_FLOOR:
        return f / TENDON_FLOOR - 1.0
    f_toe_end = tendon_force(EPS_TOE)[0]
    if f >= f_toe_end:
        return EPS_TOE + (f - f_toe_end) / (K_LIN + TENDON_FLOOR)
    eps = EPS_TOE
    for _ in range(100):
        value, slope = tendon_force(eps)
        step = (value - f) / slope
        eps -= step
        if abs(step) <= 1e-15 * (1.0 + abs(eps)):
            break
    return eps


@kernel
def thelen_rest_state(P, L, f4):
    """(s, a) of a muscle at rest (sdot = 0, fv = 1) whose tendon carries f4 Fmax at length L:
    eps from FT(eps) = f4, s = (L - l_s^T (1 + eps)) / l_0^M, a = (f4 / cos(alpha) - FPE) / fl."""
    slack, lceopt, b = P[MUS_SEESLACK], P[MUS_LCEOPT], P[MUS_PENN_B]
    s = (L - slack * (1.0 + tendon_strain(f4))) / lceopt
    lce = math.sqrt(s * s + b * b)
    return s, (f4 * lce / s - passive_force(lce)[0]) / active_force_length(lce)[0]
