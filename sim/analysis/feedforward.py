"""Feed-forward excitation schedules from static optimisation along a posture trajectory.

The thoracohumeral elevation follows a minimum-jerk profile (Flash & Hogan 1985),
theta(t) = theta0 + (theta1 - theta0)(10 tau^3 - 15 tau^4 + 6 tau^5), tau = t / T. At each knot (every
``knot_s``) the static optimisation (:mod:`sim.analysis.static_opt`) gives the activations that hold that posture;
the excitation held over [t_k, t_k+1) is the one that takes each muscle's activation from a_k to a_k+1
exactly under the DAS3 activation dynamics (Chadwick et al. 2014 eq. 1) with u constant:

    da/dt = (u - a)(c1 u + c2)  =>  a(t_k + dt) = u + (a_k - u) exp(-(c1 u + c2) dt),

solved for u in [0, 1] by bisection (the right side increases with u); where the target is out of
reach the excitation saturates. Inertia is ignored (quasi-static), so the movement lags a little.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from sim.analysis import static_opt as so
from sim.das3.model import MUS_C1, MUS_C1_FALL, MUS_C2, MUS_C2_FALL, Das3Model


def minimum_jerk(t: np.ndarray, start: float, stop: float, duration: float) -> np.ndarray:
    tau = np.clip(np.asarray(t, float) / duration, 0.0, 1.0)
    return start + (stop - start) * tau ** 3 * (10 - 15 * tau + 6 * tau ** 2)


def excitation_between(model: Das3Model, a_now: np.ndarray, a_next: np.ndarray, dt: float) -> np.ndarray:
    """The constant excitation (138,) in [0, 1] that takes a_now to a_next in dt (module docstring)."""
    mus = np.asarray(model.arrays.mus)

    def reached(u):
        rising = u >= a_now      # the rising or the falling gain pair (sim.das3.kernels.muscles.activation_gain)
        c1 = np.where(rising, mus[:, MUS_C1], mus[:, MUS_C1_FALL])
        c2 = np.where(rising, mus[:, MUS_C2], mus[:, MUS_C2_FALL])
        return u + (a_now - u) * np.exp(-(c1 * u + c2) * dt)

    lo, hi = np.zeros_like(a_now), np.ones_like(a_now)
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        low = reached(mid) < a_next
        lo, hi = np.where(low, mid, lo), np.where(low, hi, mid)
    return 0.5 * (lo + hi)


@dataclass
class FeedForward:
    times: np.ndarray            # (n,) s, knot times (the schedule's rows)
    excitation: np.ndarray       # (n, 138) held from each time to the next
    solutions: list              # the static solutions at the knots
    initial_state: np.ndarray    # (298,) the rest state of the first posture


def elevation_schedule(model: Das3Model, base: so.Posture, start_rad: float, stop_rad: float, move_s: float,
                       hold_s: float, knot_s: float = 0.02, criterion: str = "b", loads=None,
                       gh_limit: float = 0.0) -> FeedForward:
    """Hold ``start_rad`` for ``hold_s``, move to ``stop_rad`` in ``move_s`` (minimum jerk), hold for
    ``hold_s``; the other angles (and a girdle, if given) from ``base``. Raises so.StaticOptError at a knot
    that fails its checks."""
    n_move = int(round(move_s / knot_s))
    n_hold = int(round(hold_s / knot_s))
    t_move = np.arange(n_move + 1) * knot_s
    elevation = np.concatenate([np.full(n_hold, start_rad), minimum_jerk(t_move, start_rad, stop_rad, move_s),
                                np.full(n_hold, stop_rad)])
    solutions, q_start, cache = [], None, {}
    for value in elevation:
        if value not in cache:
            posture = dataclasses.replace(base, elevation=float(value))
            cache[value] = so.solve_static(model, posture, loads, criterion, gh_limit, q_start)
            q_start = cache[value].x[:11]
        solutions.append(cache[value])
    act = np.clip(np.array([s.activation for s in solutions]), 0.0, 1.0)
    u = np.array([excitation_between(model, act[k], act[min(k + 1, len(act) - 1)], knot_s)
                  for k in range(len(act))])
    return FeedForward(np.arange(len(act)) * knot_s, u, solutions, solutions[0].x.copy())
