"""Stimulation-channel optimisation: which channel levels make the arm rest at a posture with the GH joint
stable, and whether any can with these electrodes.

The unknowns are one level per channel, l_c in [0, 1] (recruitment x frequency factor of the stimulation
map, ``hil.rt.stimulation``). The excitation of element k is u_k = g_k min(1, max_c G_ck l_c) (the map's rule,
:mod:`sim.stimulation_map`, times the plant's excitation gate g_k, 0 on a denervated element; elements under no
electrode stay at 0: a paralysed arm's muscles act only passively) and, at rest, a = u. With spill-over
(``spill`` = (S, d), :mod:`sim.stimulation_map`) a channel also drives its neighbours, u_k = g_k min(1, max_c
max(G_ck l_c, S_ck s(s^-1(l_c) - d_c))), the tick's rule at force-frequency factor 1. For given levels the
arm's rest state is the plant's own static equilibrium x(l), f(x, 0, u) = 0 with every DOF free
(:func:`sim.das3.equilibrium.solve_equilibrium`, warm-started from the last one), so the answer is what the arm
does, girdle included. Its derivative follows from the implicit function theorem on the plant's exact Jacobian:
dx/du = -(df/dx restricted to q and s)^-1 df/da.

Stage 1, the smallest violation: min |posture error|² over the levels within [0, 1] (thoracohumeral
angles, elbow and pronation, rad; bounded Gauss-Newton, scipy ``least_squares``). If the error does not
vanish the posture cannot be held and the closest reachable posture is reported. Stage 2, the least
stimulation: min sum l² with the posture error = 0 and GH stability <= limit (SLSQP; the stability's
derivative by central differences over the levels).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares, minimize

from sim.analysis import static_opt as so
from sim.das3.dynamics import jacobians
from sim.das3.equilibrium import EquilibriumError, solve_equilibrium
from sim.das3.kernels.outputs import compute_outputs
from sim.das3.kernels.step import IA, IQ, IQD, IS, new_plant_work
from sim.das3.model import HUMERUS_FRAME, MUS_EXCITATION_GATE, N_DOF, N_MUS, N_STATES, Das3Model
from sim.stimulation_map import excitations_of_levels, excitations_with_spill, recruit, unrecruit

ELBOW, PRONATION = so.ELBOW, so.PRONATION


class ChannelEquilibria:
    """The arm's rest state and posture error as functions of the channel levels (cached per level set)."""

    FD_STEP = 1e-6

    def __init__(self, model: Das3Model, gains: np.ndarray, posture: so.Posture, loads: np.ndarray,
                 spill: tuple | None = None) -> None:
        self.model, self.gains, self.posture, self.loads = model, np.asarray(gains, float), posture, loads
        self.spill = None if spill is None or not np.shape(spill[0])[0] else (np.asarray(spill[0], float),
                                                                              np.asarray(spill[1], float))
        self.W = new_plant_work(model.arrays)
        self.gate = np.array(model.arrays.mus[:, MUS_EXCITATION_GATE])
        self.x = np.array(model.equilibrium_state)
        self._key = None

    def excitation(self, levels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(u (138,), du/dl (138, n_ch)): u by the map's rule (:func:`sim.stimulation_map.excitations_of_levels`)
        times the plant's excitation gate, its derivative through the channel that sets each max (ties at 0: the
        muscle's own channel)."""
        levels = np.asarray(levels, float)
        if self.spill is not None:
            return self._excitation_with_spill(levels)
        u = excitations_of_levels(self.gains, levels, np.empty(N_MUS))
        best = np.argmax(self.gains * levels[:, None] + 1e-12 * self.gains, axis=0)
        k = np.arange(N_MUS)
        du = np.zeros((N_MUS, len(levels)))
        inside = u < 1.0
        du[k[inside], best[inside]] = self.gains[best[inside], k[inside]]
        return u * self.gate, du * self.gate[:, None]

    def _excitation_with_spill(self, levels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`excitation` with spill-over: the max over the direct and the spill terms of every channel,
        the derivative through the term that sets it, dl^s/dl = s'(x - d) / s'(x) at x = s^-1(l)."""
        spill_gains, onset = self.spill
        n = len(levels)
        u = excitations_with_spill(self.gains, levels, spill_gains, onset, np.empty(N_MUS))
        x = np.array([unrecruit(v) for v in levels])
        spill_levels = np.array([recruit(v) for v in x - onset])
        slope = lambda v: np.where((v > 0.0) & (v < 1.0), 6.0 * v * (1.0 - v), 0.0)  # noqa: E731  s'(x)
        d_spill = np.divide(slope(x - onset), slope(x), out=np.zeros(n), where=slope(x) > 0.0)
        terms = np.vstack([self.gains * levels[:, None], spill_gains * spill_levels[:, None]])
        slopes = np.vstack([self.gains, spill_gains * d_spill[:, None]])
        best = np.argmax(terms + 1e-12 * np.vstack([self.gains, spill_gains]), axis=0)
        k = np.arange(N_MUS)
        du = np.zeros((N_MUS, n))
        inside = u < 1.0
        du[k[inside], best[inside] % n] = slopes[best[inside], k[inside]]
        return u * self.gate, du * self.gate[:, None]

    def at(self, levels: np.ndarray) -> "ChannelEquilibria":
        key = np.asarray(levels, float).tobytes()
        if key == self._key:
            return self
        u, du = self.excitation(levels)
        self.u = u
        self.x = solve_equilibrium(self.model, u, self.loads, self.x).x
        f, dfdx, _, _ = jacobians(self.model, self.x, np.zeros(N_STATES), u, self.loads, work=self.W)
        rows = np.r_[IQD:IA]                                   # f_eom and g
        cols = np.r_[IQ:IQD, IS:IA]                            # q and s
        dqs_da = -np.linalg.solve(dfdx[np.ix_(rows, cols)], dfdx[rows, IA:])
        self.dq_dl = dqs_da[:N_DOF] @ du
        compute_outputs(self.model.arrays, self.W)
        Rd = self.W.mb.R[HUMERUS_FRAME]
        self.th = self.W.out.th_angles.copy()
        J_post = np.vstack([so.thoracohumeral_jacobian(Rd), np.eye(N_DOF)[[ELBOW, PRONATION]]])
        self.error = np.concatenate([so.angle_error(self.th, self.posture.th_target()),
                                     [self.x[ELBOW] - self.posture.elbow_flexion,
                                      self.x[PRONATION] - self.posture.pronation]])
        self.J_error = J_post @ self.dq_dl
        self.stability = float(self.W.out.gh_stability[0])
        self._key = key
        return self

    def stability_gradient(self, levels: np.ndarray) -> np.ndarray:
        """d GH stability / d l by central differences (each a warm-started equilibrium)."""
        levels = np.asarray(levels, float)
        grad = np.zeros(len(levels))
        for c in range(len(levels)):
            step = np.zeros(len(levels))
            step[c] = self.FD_STEP
            plus = self.at(np.clip(levels + step, 0.0, 1.0)).stability
            minus = self.at(np.clip(levels - step, 0.0, 1.0)).stability
            grad[c] = (plus - minus) / (min(1.0, levels[c] + self.FD_STEP) - max(0.0, levels[c] - self.FD_STEP))
        self.at(levels)
        return grad


@dataclass
class ChannelSolution:
    levels: np.ndarray                 # (n_ch,) recruitment x frequency factor
    feasible: bool
    posture_error_deg: float           # the largest posture error of the answer (0 when feasible)
    reached_deg: dict                  # the posture the levels hold: plane, elevation, axial rotation, elbow, pronation
    gh_stability: float
    x: np.ndarray                      # (298,) the arm's rest state under these levels
    checks: so.Checks
    message: str
    time_s: float


POSTURE_KEYS = ("plane_of_elevation", "elevation", "axial_rotation", "elbow_flexion", "pronation")


def solve_channels(model: Das3Model, posture: so.Posture, gains: np.ndarray, loads=None, gh_limit: float = 0.0,
                   tolerances: so.Tolerances = so.Tolerances(), starts: int = 4, seed: int = 0,
                   spill: tuple | None = None) -> ChannelSolution:
    """Channel levels that make the arm rest at ``posture`` at least stimulation (module docstring).
    Stage 1 is a local method: it runs from all levels 0 and from ``starts - 1`` random level sets in
    [0, 0.3] (seeded), keeping the smallest violation; a start whose path leaves every static
    equilibrium is skipped. Raises so.StaticOptError if every start is. ``spill``: (spill gains, onsets), the
    stimulation map's spill-over (``StimulationModel.spill_gains``, ``spill_onset``), or None."""
    t_start = time.perf_counter()
    so.check_inputs(posture, gh_limit)
    loads = so.checked_loads(loads)
    gains = np.asarray(gains, float)
    rng = np.random.default_rng(seed)
    best, best_error, failures = None, math.inf, []
    for start in [np.zeros(gains.shape[0])] + [rng.uniform(0.0, 0.3, gains.shape[0]) for _ in range(starts - 1)]:
        eqs = ChannelEquilibria(model, gains, posture, loads, spill)
        try:
            levels = _least_violation(eqs, start)
            error = float(np.max(np.abs(eqs.at(levels).error)))
        except EquilibriumError as exc:
            failures.append(str(exc))
            continue
        if error < best_error:
            best, best_error = (eqs, levels), error
        if error <= tolerances.posture_rad:
            break
    if best is None:
        raise so.StaticOptError(f"no static equilibrium along any start: {failures[0]}", None)
    eqs, levels = best
    if best_error <= tolerances.posture_rad:
        try:
            levels = _least_stimulation(eqs, levels, gh_limit)
        except EquilibriumError:
            pass                                   # keep the feasible stage-1 levels
    return _answer(eqs, levels, posture, gh_limit, tolerances, t_start)


def _least_violation(eqs: ChannelEquilibria, start: np.ndarray) -> np.ndarray:
    """Stage 1 from ``start``: levels in [0, 1] at the smallest posture error."""
    fit = least_squares(lambda lv: eqs.at(lv).error, start, jac=lambda lv: eqs.at(lv).J_error, bounds=(0.0, 1.0),
                        method="trf", xtol=1e-14, ftol=1e-14, gtol=1e-14, max_nfev=200)
    return fit.x


def _least_stimulation(eqs: ChannelEquilibria, levels: np.ndarray, gh_limit: float) -> np.ndarray:
    """Stage 2 from a feasible point (returns it unchanged when SLSQP does not improve on it feasibly)."""
    cons = [{"type": "eq", "fun": lambda lv: eqs.at(lv).error, "jac": lambda lv: eqs.at(lv).J_error}]
    if gh_limit is not None:
        cons.append({"type": "ineq", "fun": lambda lv: np.array([gh_limit - eqs.at(lv).stability]),
                     "jac": lambda lv: -eqs.stability_gradient(lv)[None, :]})
    res = minimize(lambda lv: float(lv @ lv), levels, jac=lambda lv: 2 * lv, method="SLSQP",
                   bounds=[(0.0, 1.0)] * len(levels), constraints=cons, options={"maxiter": 200, "ftol": 1e-12})
    return res.x


def _answer(eqs: ChannelEquilibria, levels, posture, gh_limit, tol, t_start) -> ChannelSolution:
    """The checked answer at ``levels``: the plant's residual, the posture error and GH stability."""
    e = eqs.at(levels)
    reached = dict(zip(POSTURE_KEYS, np.degrees(np.r_[e.th, e.x[ELBOW], e.x[PRONATION]]).round(4).tolist()))
    worst = math.degrees(float(np.max(np.abs(e.error))))
    checks = so.check_state(eqs.model, e.x, posture, eqs.loads, gh_limit, tol)   # q̇ = 0, a = u exactly
    feasible = checks.passed
    if feasible:
        message = f"feasible: GH stability {e.stability:+.3f}"
    elif worst > math.degrees(tol.posture_rad):
        message = (f"infeasible: these channels cannot hold the posture; the closest rest posture they reach is "
                   f"{worst:.3g} deg away (" + ", ".join(f"{k} {v:.1f}" for k, v in reached.items()) + " deg)")
    else:
        message = "infeasible: " + "; ".join(checks.failures)
    return ChannelSolution(np.asarray(levels, float).copy(), feasible, 0.0 if feasible else worst, reached,
                           e.stability, e.x.copy(), checks, message, time.perf_counter() - t_start)

