"""Feed-forward excitation schedules from static optimisation along a posture trajectory.

The thoracohumeral elevation follows a minimum-jerk profile (Flash & Hogan 1985),
theta(t) = theta0 + (theta1 - theta0)(10 tau^3 - 15 tau^4 + 6 tau^5), tau = t / T. At each knot (every
``knot_s``) the static optimisation (:mod:`sim.analysis.static_opt`) gives the activations that hold that posture;
the excitation held over [t_k, t_k+1) is the one that takes each muscle's activation from a_k to a_k+1
exactly under the DAS3 activation dynamics (Chadwick et al. 2014 eq. 1) with u constant:

    da/dt = (u - a)(c1 u + c2)  =>  a(t_k + dt) = u + (a_k - u) exp(-(c1 u + c2) dt),

solved for u in [0, 1] by bisection (the right side increases with u); where the target is out of
reach the excitation saturates; a denervated element's excitation is multiplied by its gate, 0 (as the plant
does). Inertia is ignored (quasi-static), so the movement lags a little.

:func:`play` runs a schedule open loop in the plant, as the loopback playback does, to compare the movement
with Chadwick et al. 2014 Fig. 3 (the ``FIG3_*`` constants).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from sim.analysis import static_opt as so
from sim.analysis.passive_limits import PassiveLimits
from sim.das3.kernels.step import IA
from sim.das3.model import MUS_C1, MUS_C1_FALL, MUS_C2, MUS_C2_FALL, MUS_EXCITATION_GATE, N_DOF, Das3Model
from sim.das3.plant import Plant

DEG = np.pi / 180.0
FIG3_PLANE_RAD = 50.0 * DEG
"""Chadwick et al. 2014 §III-A (Fig. 3): "the output plane of elevation, which is about 50 deg". The DAS3
authors' thoracohumeral angles are the YZY decomposition of the model's outputs (their ``rotyzy``: plane
atan2(R32, -R12), elevation acos(R22)), so 50 deg lies between their scapular plane (45 deg in their
maximum-moment script) and the sagittal plane (90 deg), not in the sagittal plane."""
FIG3_START_RAD, FIG3_STOP_RAD = 10.0 * DEG, 80.0 * DEG
"""Chadwick et al. 2014 §III-A: "The arm elevation goes from about 10 to 80 deg"."""
FIG3_DURATION_S = 1.3
"""Chadwick et al. 2014 §III-A: "The simulated movement was 1.3 s long"."""
FIG3_STEP_S = 0.004
"""Chadwick et al. 2014 §II-E: "a 4-ms timestep was used"."""
REST_LONG_AXIS_RAD = 60.0 * DEG
"""Plane of elevation + axial rotation of the model's passive equilibrium (YZY angles 20.3, 14.5, 39.9 deg):
the long-axis rotation the schedule keeps, axial rotation = REST_LONG_AXIS_RAD - plane (Fig. 3 gives none)."""


def plant_limits(model: Das3Model) -> PassiveLimits:
    """The bounds of a schedule the plant is to play: the model's girdle ranges widened to contain its
    published rest posture (ACz, ACx lie about 3 deg outside them), no contact or conoid limit. The
    limits of :mod:`sim.analysis.passive_limits` bound maximal efforts (Chadwick Figs. 4-8); Fig. 3 is a
    forward simulation of the plant, which has no hard ranges and whose rest the schedule starts near."""
    rest = np.asarray(model.equilibrium_state[:6])
    ranges = np.asarray(model.dof_ranges, float)[:6]
    widened = np.column_stack([np.minimum(ranges[:, 0], rest), np.maximum(ranges[:, 1], rest)])
    return PassiveLimits(None, None, tuple(map(tuple, widened)))


def minimum_jerk(t: np.ndarray, start: float, stop: float, duration: float) -> np.ndarray:
    tau = np.clip(np.asarray(t, float) / duration, 0.0, 1.0)
    return start + (stop - start) * tau ** 3 * (10 - 15 * tau + 6 * tau ** 2)


def excitation_between(model: Das3Model, a_now: np.ndarray, a_next: np.ndarray, dt: float) -> np.ndarray:
    """The constant excitation (138,) in [0, gate] that takes a_now to a_next in dt (module docstring)."""
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
    return 0.5 * (lo + hi) * mus[:, MUS_EXCITATION_GATE]


@dataclass
class FeedForward:
    times: np.ndarray            # (n,) s, knot times (the schedule's rows)
    excitation: np.ndarray       # (n, 138) held from each time to the next
    solutions: list              # the static solutions at the knots
    initial_state: np.ndarray    # (298,) the rest state of the first posture


def elevation_schedule(model: Das3Model, base: so.Posture, start_rad: float, stop_rad: float, move_s: float,
                       hold_s: float, knot_s: float = 0.02, criterion: str = "b", loads=None,
                       gh_limit: float = 0.0, limits: PassiveLimits | None = None) -> FeedForward:
    """Hold ``start_rad`` for ``hold_s``, move to ``stop_rad`` in ``move_s`` (minimum jerk), hold for
    ``hold_s``; the other angles (and a girdle, if given) from ``base``; ``limits`` default
    :func:`plant_limits`. Raises so.StaticOptError at a knot that fails its checks."""
    limits = plant_limits(model) if limits is None else limits
    n_move = int(round(move_s / knot_s))
    n_hold = int(round(hold_s / knot_s))
    t_move = np.arange(n_move + 1) * knot_s
    elevation = np.concatenate([np.full(n_hold, start_rad), minimum_jerk(t_move, start_rad, stop_rad, move_s),
                                np.full(n_hold, stop_rad)])
    solutions, q_start, cache = [], None, {}
    for value in elevation:
        if value not in cache:
            posture = dataclasses.replace(base, elevation=float(value))
            cache[value] = so.solve_static(model, posture, loads, criterion, gh_limit, q_start, limits=limits)
            q_start = cache[value].x[:11]
        solutions.append(cache[value])
    act = np.clip(np.array([s.activation for s in solutions]), 0.0, 1.0)
    u = np.array([excitation_between(model, act[k], act[min(k + 1, len(act) - 1)], knot_s)
                  for k in range(len(act))])
    return FeedForward(np.arange(len(act)) * knot_s, u, solutions, solutions[0].x.copy())


@dataclass
class Playback:
    times: np.ndarray            # (n,) s, the end of each plant step
    q: np.ndarray                # (n, 11) rad
    th_angles: np.ndarray        # (n, 3) rad, thoracohumeral YZY: plane of elevation, elevation, axial rotation
    gh_force: np.ndarray         # (n, 3) N on the scapula, scapula frame
    gh_stability: np.ndarray     # (n,) Chadwick eq. 9, < 0 inside the glenoid


def play(model: Das3Model, times: np.ndarray, excitation: np.ndarray, initial_state: np.ndarray,
         duration_s: float, step_s: float = FIG3_STEP_S) -> Playback:
    """The schedule played open loop, as the loopback playback plays it: row k held from ``times[k]``, the
    last row to the end; the plant starts from ``initial_state`` at rest (excitation = its activation)."""
    plant = Plant(model, step_s=step_s, initial_state=initial_state)
    plant.reset(initial_state, excitation=np.asarray(initial_state)[IA:])
    n = int(round(duration_s / step_s))
    out = Playback(np.arange(1, n + 1) * step_s, np.empty((n, N_DOF)), np.empty((n, 3)), np.empty((n, 3)),
                   np.empty(n))
    rows = np.searchsorted(np.asarray(times), np.arange(n) * step_s + 1e-9, side="right") - 1
    for k, row in enumerate(rows):
        plant.step(excitation[max(row, 0)])
        o = plant.outputs
        out.q[k], out.th_angles[k], out.gh_force[k], out.gh_stability[k] = o.q, o.th_angles, o.gh_force, \
            o.gh_stability
    return out
