"""Fitting of one joint's agonist/antagonist MTG pair to a recorded motion without EMG or MVC: the program of
Millard, Emonds, Harant & Mombaur (2019), Sect. 2.2 and 2.3 (``shared/papers/millard2019-reduced-muscle-mtg-fitting
.txt``), on the MTG torque of ``sim/mtg/curves.py`` (Eq. (3)).

Per MTG i with direction u (+1 or -1 in joint coordinates), from samples j of the joint angle theta_j, joint
angular velocity dtheta_j and net joint torque tau_j:

    Eq. (7)   tau_exp(t_j) = tau_j if tau_j u > 0 else 0     (no co-contraction: the net torque goes to one MTG)
    Eq. (8)   x = (sA, sV, dP, lamP, s_tau)                  (lamA, lamV stay at their values, eps^(1/4))
    Eq. (9)   min_x (x - x_o)^T W (x - x_o)                  (W = I in the paper, Sect. 2.3)
    Eq. (10)  (tau_i(a_max, theta_j, omega_j, x) - tau_exp(t_j)) u >= 0     (activation <= a_max)
    Eq. (11)  (tau_exp(t_j) - tau_i(0, theta_j, omega_j, x)) u >= 0         (activation >= 0)
    Eq. (12)  t_max^PE - tPE(theta_j, dP, lamP) >= 0                       (passive multiplier <= t_max^PE)

In this module's MTG-direction quantities (``mtg_curves``: tau along u, omega = u dtheta/dt, concentric-positive)
(10) and (11) read tau(a_max) >= e_j >= tau(0) with e_j = max(u tau_j, 0); they are evaluated divided by tau_o^M
(same feasible set, O(1) scale). Eq. (12) is printed in the paper with a factor u_i^M; for u = -1 that would
demand tPE >= t_max, contradicting the text ("the normalized passive-torque-angle multiplier is less than
t_max"), so the factor is left out here.

What the paper does NOT specify, and the choices made here:

- It calls Eqs. (9)-(12) a QP, but (10)-(12) are nonlinear in x (through the curves); it solves them with IPOPT
  (Sect. 2.3), i.e. as a nonlinear program with a quadratic objective. It describes no linearisation around x_o
  and no outer iteration. Here it is solved the same way, as an NLP: ``scipy.optimize.minimize(method="SLSQP")``
  with exact gradients of every constraint. SLSQP is a sequential QP method: each step solves the QP of Eq. (9)
  with (10)-(12) linearised at the current iterate, the first one at x_o, and repeats until the nonlinear
  constraints hold, which is the linearise-around-x_o QP iterated to convergence. It is dense, which suits
  5 variables and 3 N constraints, needs no new dependency, and returns x_o untouched when x_o is feasible
  (zero objective gradient, no violated constraint). ``trust-constr`` would also do but is slower on this size.
- "The QP ... will only make adjustments to make the MTGs stronger, or more flexible" (Sect. 2.2) is stated as
  intent, not as constraints. Without bounds, Eq. (11) could be met by a smaller s_tau (weaker), so it is
  enforced here by bounds (``only_stronger=True``): sA >= sA_o, sV >= sV_o, s_tau >= s_tau_o, lamP_o <= lamP <= 1,
  and dP moved only towards theta_1^PE (the direction in which tPE rises, -u: that is what makes the MTG more
  flexible). Optional upper bounds (``upper``) are this module's addition; the paper has none.
- The paper's feasibility check (Sect. 2.3: "we first check that the required tau_exp can be generated with
  activations between 0 and a_max and a passive-torque-angle multiplier of less than t_max^PE") is done here on
  the nonlinear model, never trusting the solver: Eq. (3) is linear in a and solved exactly,
  a_j = (e_j/(s_tau tau_o) - tPE D_j)/(tA tV), D_j = 1 - beta omega_j/(sV omega_max) (this is Eq. (13)'s
  demanded active torque tau_A divided by s_tau tau_o tA tV).
- W defaults to the identity (Sect. 2.3); dP is in rad, so a unit weight compares 1 rad with a 100 % change of
  the scale factors.

SI units, radians. The program is solved for each MTG of the pair independently, as in the paper.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, minimize

from sim.mtg.curves import FitParameters, MtgCurves, active_torque_angle, passive_torque_angle, torque_velocity

X_NAMES = ("s_a", "s_v", "delta_p", "lambda_p", "s_tau")
"""Eq. (8): the optimisation variables, in order."""

ACTIVATION_TOL = 1e-6
"""Tolerance of the feasibility check on a (activation units) and on tPE (normalised)."""
ACTIVE_TOL = 1e-6
"""A constraint (normalised torque, or tPE) or bound within this of its limit at the solution is reported active."""


def x_of(fit: FitParameters) -> np.ndarray:
    """Eq. (8): x = (sA, sV, dP, lamP, s_tau) of a parameter set."""
    return np.array([getattr(fit, n) for n in X_NAMES], dtype=np.float64)


def fit_of(x: np.ndarray, template: FitParameters) -> FitParameters:
    """The parameter set with x replaced and lamA, lamV kept from ``template``."""
    return dataclasses.replace(template, **{n: float(v) for n, v in zip(X_NAMES, x)})


def mtg_direction(curves: MtgCurves) -> int:
    """u of Eq. (7) from the curves' own convention (``mtg_curves``): tPE rises against the MTG's direction,
    so u = -sign(theta_1^PE - theta_0^PE)."""
    return -1 if curves.passive.theta_one > curves.passive.theta_zero else 1


@dataclass(frozen=True)
class _Terms:
    """Curve values and their x-derivatives at every sample (MTG-direction omega)."""

    ta: np.ndarray
    ta_sa: np.ndarray
    tv: np.ndarray
    tv_sv: np.ndarray
    tp: np.ndarray
    tp_dp: np.ndarray
    tp_lp: np.ndarray
    damp: np.ndarray
    damp_sv: np.ndarray


def _terms(curves: MtgCurves, fit: FitParameters, theta: np.ndarray, omega: np.ndarray) -> _Terms:
    n = theta.size
    ta, ta_sa, tv, tv_sv, tp, tp_dp, tp_lp = (np.empty(n) for _ in range(7))
    ax, ay = curves.a_curve.xs, curves.a_curve.ys
    vx, vy = curves.v_curve.xs, curves.v_curve.ys
    px, py = curves.p_curve.xs, curves.p_curve.ys
    t_opt = curves.active.theta_opt
    for j in range(n):
        th, om = float(theta[j]), float(omega[j])
        ta[j], dta, _ = active_torque_angle(ax, ay, th, t_opt, fit.s_a, fit.lambda_a)
        ta_sa[j] = -dta * (th - t_opt) / fit.s_a                  # d/dsA of Eq. (4)
        tv[j], dtv, _ = torque_velocity(vx, vy, om, fit.s_v, fit.lambda_v)
        tv_sv[j] = -dtv * om / fit.s_v                            # d/dsV of Eq. (5)
        raw, draw, _ = passive_torque_angle(px, py, th, fit.delta_p, 0.0)
        tp[j] = (1.0 - fit.lambda_p) * raw                        # Eq. (6)
        tp_dp[j] = -(1.0 - fit.lambda_p) * draw                   # d/ddP
        tp_lp[j] = -raw                                           # d/dlamP
    rate = curves.beta / (fit.s_v * curves.velocity.omega_max)
    return _Terms(ta, ta_sa, tv, tv_sv, tp, tp_dp, tp_lp, 1.0 - rate * omega, rate * omega / fit.s_v)


def _samples(theta, dtheta, tau) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    theta, dtheta, tau = (np.asarray(v, dtype=np.float64).ravel() for v in (theta, dtheta, tau))
    if not (theta.size == dtheta.size == tau.size) or theta.size == 0:
        raise ValueError("theta, dtheta and tau need the same, non-zero number of samples")
    if not (np.all(np.isfinite(theta)) and np.all(np.isfinite(dtheta)) and np.all(np.isfinite(tau))):
        raise ValueError("samples must be finite")
    return theta, dtheta, tau


def demanded_torque(tau: np.ndarray, direction: int) -> np.ndarray:
    """Eq. (7) along the MTG's direction: e = max(u tau, 0) (N m)."""
    return np.maximum(direction * np.asarray(tau, dtype=np.float64), 0.0)


def required_activation(curves: MtgCurves, fit: FitParameters, theta, dtheta, tau, direction: int
                        ) -> tuple[np.ndarray, np.ndarray]:
    """Eq. (3) solved for a at every sample, with tau_M = tau_exp of Eq. (7) (it is linear in a):
    a = (e/(s_tau tau_o) - tPE D)/(tA tV). Returns (a, tPE)."""
    theta, dtheta, tau = _samples(theta, dtheta, tau)
    t = _terms(curves, fit, theta, direction * dtheta)
    e = demanded_torque(tau, direction) / (fit.s_tau * curves.tau_max)
    return (e - t.tp * t.damp) / (t.ta * t.tv), t.tp


@dataclass(frozen=True)
class FeasibilityCheck:
    """The paper's check (Sect. 2.3) on the nonlinear model: 0 <= a_j <= a_max and tPE_j <= t_max^PE at every
    sample. ``worst_sample`` is the sample of the largest violation (or, if feasible, of the smallest margin);
    ``worst_kind`` is 'a>a_max', 'a<0' or 'tPE>t_max'; ``worst_violation`` > 0 means infeasible there."""

    feasible: bool
    worst_sample: int
    worst_kind: str
    worst_violation: float
    a_min: float
    a_max: float
    t_pe_max: float


def check_feasibility(curves: MtgCurves, fit: FitParameters, theta, dtheta, tau, direction: int, a_max: float,
                      t_max_pe: float, tol: float = ACTIVATION_TOL) -> FeasibilityCheck:
    """The feasibility check of Sect. 2.3 for one MTG with parameters ``fit`` (activations from Eq. (3))."""
    a, tp = required_activation(curves, fit, theta, dtheta, tau, direction)
    kinds = ("a>a_max", "a<0", "tPE>t_max")
    excess = np.stack([a - a_max, -a, tp - t_max_pe])
    flat = int(np.argmax(excess))
    k, j = divmod(flat, a.size)
    worst = float(excess[k, j])
    ok = bool(np.all(np.isfinite(a))) and worst <= tol
    return FeasibilityCheck(ok, j, kinds[k], worst, float(np.min(a)), float(np.max(a)), float(np.max(tp)))


@dataclass(frozen=True)
class MtgFit:
    """One MTG's result. ``active`` maps 'eq10', 'eq11', 'eq12' to the samples where that constraint is active
    at the solution and 'bounds' to the names of the active bounds of x."""

    direction: int
    start: FitParameters
    fitted: FitParameters
    objective: float
    activation_before: np.ndarray
    activation_after: np.ndarray
    check_before: FeasibilityCheck
    check_after: FeasibilityCheck
    active: dict
    solver_success: bool
    solver_message: str
    iterations: int

    @property
    def feasible(self) -> bool:
        """The nonlinear re-check after fitting, not the solver's flag."""
        return self.check_after.feasible


@dataclass(frozen=True)
class JointFit:
    """The pair's results, in the order of the input pair."""

    mtgs: tuple[MtgFit, MtgFit]

    @property
    def feasible(self) -> bool:
        return all(m.feasible for m in self.mtgs)


def objective(x: np.ndarray, x_o: np.ndarray, weights: np.ndarray) -> float:
    """Eq. (9): (x - x_o)^T W (x - x_o)."""
    d = np.asarray(x, dtype=np.float64) - x_o
    return float(d @ weights @ d)


def _constraints(curves, template, theta, omega, e, a_max, t_max_pe):
    """Eqs. (10)-(12) stacked (normalised by tau_o) and their Jacobian, as functions of x."""
    def fun_jac(x):
        fit = fit_of(x, template)
        t = _terms(curves, fit, theta, omega)
        s_tau = fit.s_tau
        act, pas = t.ta * t.tv, t.tp * t.damp
        c10 = s_tau * (a_max * act + pas) - e
        c11 = e - s_tau * pas
        c12 = t_max_pe - t.tp
        n = theta.size
        jac = np.zeros((3 * n, 5))
        pas_sv = t.tp * t.damp_sv
        jac[:n, 0] = s_tau * a_max * t.ta_sa * t.tv
        jac[:n, 1] = s_tau * (a_max * t.ta * t.tv_sv + pas_sv)
        jac[:n, 2] = s_tau * t.damp * t.tp_dp
        jac[:n, 3] = s_tau * t.damp * t.tp_lp
        jac[:n, 4] = a_max * act + pas
        jac[n:2 * n, 1] = -s_tau * pas_sv
        jac[n:2 * n, 2] = -s_tau * t.damp * t.tp_dp
        jac[n:2 * n, 3] = -s_tau * t.damp * t.tp_lp
        jac[n:2 * n, 4] = -pas
        jac[2 * n:, 2] = -t.tp_dp
        jac[2 * n:, 3] = -t.tp_lp
        return np.concatenate([c10, c11, c12]), jac
    return fun_jac


def _bounds(curves: MtgCurves, x_o: np.ndarray, only_stronger: bool, upper: dict | None) -> Bounds:
    lo = np.array([1e-3, 1e-3, -np.inf, 0.0, 1e-3])
    hi = np.array([np.inf, np.inf, np.inf, 1.0, np.inf])
    if only_stronger:       # Sect. 2.2: "only ... stronger, or more flexible"
        lo[[0, 1, 3, 4]] = x_o[[0, 1, 3, 4]]
        if curves.passive.theta_one > curves.passive.theta_zero:
            lo[2] = x_o[2]
        else:
            hi[2] = x_o[2]
    for name, value in (upper or {}).items():
        k = X_NAMES.index(name)
        hi[k] = min(hi[k], value)
        if name == "delta_p":                    # a limit on |dP|
            lo[k] = max(lo[k], -value)
    if np.any(lo > hi):
        raise ValueError("the upper bounds exclude the starting point")
    return Bounds(lo, hi)


def fit_mtg(curves: MtgCurves, theta, dtheta, tau, a_max: float, t_max_pe: float,
            start: FitParameters = FitParameters(), direction: int | None = None, weights=None,
            only_stronger: bool = True, upper: dict | None = None, maxiter: int = 300) -> MtgFit:
    """Solve Eqs. (9)-(12) for one MTG and re-check the result on the nonlinear model (Sect. 2.3).

    theta (rad), dtheta (rad/s) and tau (N m) are joint-coordinate samples; ``direction`` u defaults to
    ``mtg_direction(curves)``; ``weights`` is W (5x5 or a diagonal of 5, default I); ``upper`` maps names of x
    to upper limits (for dP: a limit on |dP|)."""
    if not (0.0 < a_max <= 1.0):
        raise ValueError("a_max must lie in (0, 1]")
    if not (math.isfinite(t_max_pe) and t_max_pe > 0.0):
        raise ValueError("t_max_pe must be finite and > 0")
    theta, dtheta, tau = _samples(theta, dtheta, tau)
    u = mtg_direction(curves) if direction is None else int(direction)
    if u not in (-1, 1):
        raise ValueError("direction must be +1 or -1")
    w = np.eye(5) if weights is None else np.asarray(weights, dtype=np.float64)
    if w.shape == (5,):
        w = np.diag(w)
    if w.shape != (5, 5) or not np.all(np.linalg.eigvalsh(0.5 * (w + w.T)) > 0.0):
        raise ValueError("weights must be a positive-definite 5x5 matrix or a positive diagonal of 5")
    x_o = x_of(start)
    omega = u * dtheta
    e = demanded_torque(tau, u) / curves.tau_max
    fun_jac = _constraints(curves, start, theta, omega, e, a_max, t_max_pe)
    bounds = _bounds(curves, x_o, only_stronger, upper)
    cache = {}

    def cons(x):
        key = x.tobytes()
        if key not in cache:
            cache.clear()
            cache[key] = fun_jac(x)
        return cache[key]

    res = minimize(lambda x: objective(x, x_o, w), x_o, jac=lambda x: 2.0 * w @ (x - x_o), method="SLSQP",
                   bounds=bounds,
                   constraints=[{"type": "ineq", "fun": lambda x: cons(x)[0], "jac": lambda x: cons(x)[1]}],
                   options={"maxiter": maxiter, "ftol": 1e-14})
    x = np.clip(res.x, bounds.lb, bounds.ub)
    fitted = fit_of(x, start)
    c, _ = fun_jac(x)
    n = theta.size
    active = {"eq10": np.flatnonzero(c[:n] <= ACTIVE_TOL), "eq11": np.flatnonzero(c[n:2 * n] <= ACTIVE_TOL),
              "eq12": np.flatnonzero(c[2 * n:] <= ACTIVE_TOL),
              "bounds": tuple(f"{X_NAMES[k]}{side}" for k in range(5) for side, lim in ((">=", bounds.lb[k]),
                              ("<=", bounds.ub[k])) if math.isfinite(lim) and abs(x[k] - lim) <= ACTIVE_TOL)}
    a_before, _ = required_activation(curves, start, theta, dtheta, tau, u)
    a_after, _ = required_activation(curves, fitted, theta, dtheta, tau, u)
    return MtgFit(u, start, fitted, objective(x, x_o, w), a_before, a_after,
                  check_feasibility(curves, start, theta, dtheta, tau, u, a_max, t_max_pe),
                  check_feasibility(curves, fitted, theta, dtheta, tau, u, a_max, t_max_pe),
                  active, bool(res.success), str(res.message), int(res.nit))


def fit_joint(pair: Sequence[MtgCurves], theta, dtheta, tau, a_max: float, t_max_pe: float,
              starts: Sequence[FitParameters] | None = None, directions: Sequence[int] | None = None,
              **options) -> JointFit:
    """Eqs. (7)-(12) for both MTGs of one joint (each its own program, as in the paper); ``options`` go to
    ``fit_mtg``. The two directions must be opposite."""
    if len(pair) != 2:
        raise ValueError("a joint has one agonist and one antagonist MTG")
    starts = (FitParameters(), FitParameters()) if starts is None else tuple(starts)
    dirs = tuple(mtg_direction(c) for c in pair) if directions is None else tuple(int(d) for d in directions)
    if len(starts) != 2 or len(dirs) != 2 or dirs[0] != -dirs[1]:
        raise ValueError("need two starting points and two opposite directions")
    return JointFit(tuple(fit_mtg(c, theta, dtheta, tau, a_max, t_max_pe, s, d, **options)
                          for c, s, d in zip(pair, starts, dirs)))
