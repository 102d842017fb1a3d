"""Multi-start for the nonconvex analyses (static optimisation, maximum moments).

Both problems have local optima: the girdle is free, the thorax contact and the joint ranges bend the feasible
set, and a gradient method returns the optimum of the basin it starts in. The solver's "converged" therefore
says nothing about optimality. Each point is solved from several starts:

- the published passive equilibrium's girdle (``"published"``),
- warm starts handed in by the caller (e.g. the neighbouring angle's solution, ``"angle below"``),
- ``random_starts`` girdles drawn uniformly within ``spread_rad`` of the published girdle, clipped to the
  girdle's ranges, from ``numpy.random.default_rng((seed, point_index))`` (``"random k"``): the same seed and
  point give the same starts on every machine.

Every checked optimum is kept (:class:`LocalOptima`); the point's answer is the best one. Two optima whose
values differ by more than ``tolerance`` (relative) mean the starts found different basins: the point is
flagged, since a better basin may still exist that no start reached.

The starts of a sweep run in a pool of worker processes (:class:`SolvePool`). A multi-start sweep
(:mod:`sim.analysis.max_moment`) knows most of its solves in advance (the published and random starts of every
angle) and a few only when an earlier one has finished (a continuation start is the neighbour's best). The pool
runs both kinds on ``workers`` processes: a job handed in as ``urgent`` (on the sequential chain) starts before
any queued one, the rest start in the order given, and at most ``workers`` jobs run at once so that an urgent
job never waits behind the whole queue. Every job is a deterministic function of its arguments and the caller
reads results by ticket in its own order, so the answers are the same whatever the number of workers and the
order the jobs finish in.

With one worker nothing is started in advance: a job runs in this process when its result is asked for.
"""
from __future__ import annotations

import math
import os
from collections import deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field

import numpy as np

from sim.analysis import static_opt as so
from sim.analysis.passive_limits import MINIMAL_EFFORT, PassiveLimits, dof_ranges
from sim.das3.layout import N_DOF, Das3Model

GIRDLE = slice(0, 6)


@dataclass(frozen=True)
class StartPlan:
    """Which starts each point gets (module docstring)."""

    random_starts: int = 2
    seed: int = 0
    spread_rad: float = math.radians(10.0)
    tolerance: float = 0.01

    def __post_init__(self) -> None:
        if not 0 <= self.random_starts <= 1000:
            raise ValueError("random_starts must be in 0..1000")
        if not (math.isfinite(self.spread_rad) and self.spread_rad >= 0.0):
            raise ValueError("spread_rad must be a finite angle >= 0")
        if not (math.isfinite(self.tolerance) and self.tolerance >= 0.0):
            raise ValueError("tolerance must be finite and >= 0")


def random_girdles(reference_q: np.ndarray, ranges: np.ndarray, plan: StartPlan, point_index: int) -> list:
    """``plan.random_starts`` joint-angle vectors: ``reference_q`` with its six girdle angles drawn uniformly
    within ``plan.spread_rad`` and clipped to ``ranges`` (11, 2); seeded by (seed, point_index)."""
    rng = np.random.default_rng((plan.seed, point_index))
    lo, hi = np.asarray(ranges)[GIRDLE].T
    starts = []
    for _ in range(plan.random_starts):
        q = np.array(reference_q, float)
        q[GIRDLE] = np.clip(q[GIRDLE] + rng.uniform(-plan.spread_rad, plan.spread_rad, 6), lo, hi)
        starts.append(q)
    return starts


@dataclass
class LocalOptima:
    """The checked optima one point reached, as (start label, value); ``lower_is_better`` False for
    maxima. ``failed``: starts whose solution failed the checks."""

    lower_is_better: bool
    found: list[tuple[str, float]] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    def add(self, label: str, value: float) -> None:
        self.found.append((label, float(value)))

    def ranked(self) -> list[tuple[str, float]]:
        return sorted(self.found, key=lambda item: item[1], reverse=not self.lower_is_better)

    @property
    def best_label(self) -> str:
        return self.ranked()[0][0] if self.found else ""

    @property
    def spread(self) -> float:
        """max - min of the optima found (0 with fewer than two)."""
        values = [v for _, v in self.found]
        return max(values) - min(values) if len(values) > 1 else 0.0

    @property
    def gap(self) -> float:
        """Relative difference between the best optimum and the best one from another basin: the best value
        that differs from the best by more than float noise, or 0 when every start reached the same value."""
        ranked = [v for _, v in self.ranked()]
        if len(ranked) < 2:
            return 0.0
        scale = max(abs(ranked[0]), 1.0)
        return abs(ranked[0] - ranked[1]) / scale

    def flagged(self, tolerance: float) -> bool:
        """The best two optima differ by more than ``tolerance``."""
        return self.gap > tolerance


def solve_from_starts(solve: Callable[[np.ndarray | None], object], value: Callable[[object], float],
                      starts: list[tuple[str, np.ndarray | None]], optima: LocalOptima,
                      failure: type[Exception]):
    """Run ``solve(q_start)`` from each (label, q) start; record each checked optimum's ``value`` in
    ``optima``; return the best result, or the last ``failure`` raised when none passed."""
    attempts = ((label, attempt(solve, q, failure)) for label, q in starts)
    return best_of_results(attempts, value, optima, failure)


def attempt(solve: Callable[[np.ndarray | None], object], q: np.ndarray | None, failure: type[Exception]):
    """``solve`` from the joint angles q (None: the solver's own start); its ``failure`` returned, not raised."""
    try:
        return solve(None if q is None else np.asarray(q, float)[:N_DOF])
    except failure as exc:
        return exc


def best_of_results(results, value: Callable[[object], float], optima: LocalOptima, failure: type[Exception]):
    """The best of (label, result or ``failure``) pairs in start order (the earlier start wins a tie), each
    checked optimum's ``value`` recorded in ``optima``; raises the last failure when none passed."""
    best, error = None, None
    for label, result in results:
        if isinstance(result, failure):
            optima.failed.append(label)
            error = result
            continue
        optima.add(label, value(result))
        if best is None or _better(value(result), value(best), optima.lower_is_better):
            best = result
    if best is None:
        raise error if error is not None else failure("no start given")
    return best


def _better(new: float, old: float, lower_is_better: bool) -> bool:
    return new < old if lower_is_better else new > old


def girdle_starts(model: Das3Model, plan: StartPlan, index: int, limits: PassiveLimits) -> list:
    """("published", None) and the plan's random girdles around the published equilibrium, within the
    limits' ranges, as (label, q) starts of point ``index``."""
    published = np.array(model.equilibrium_state[:N_DOF])
    randoms = random_girdles(published, dof_ranges(model, limits), plan, index)
    return [("published", None), *((f"random {n}", q) for n, q in enumerate(randoms))]


def static_starts(model: Das3Model, posture: so.Posture, plan: StartPlan, index: int, limits: PassiveLimits,
                  warm: list[tuple[str, np.ndarray]] = ()) -> list[tuple[str, np.ndarray | None]]:
    """The starts of one static-optimisation posture: published, ``warm`` ones, then the random girdles
    (none with the girdle prescribed: the posture is then fixed and the problem convex in alpha)."""
    if posture.girdle is not None:
        return [("published", None)]
    published, *randoms = girdle_starts(model, plan, index, limits)
    return [published, *warm, *randoms]


def _static_solver(model, posture, loads, criterion, gh_limit, settings, limits):
    """q_start -> :func:`sim.analysis.static_opt.solve_static` of one posture."""
    def solve(q):
        return so.solve_static(model, posture, loads, criterion, gh_limit, q, settings, limits=limits)

    return solve


def solve_static_best(model: Das3Model, posture: so.Posture, loads=None, criterion: str = "b",
                      gh_limit: float | None = 0.0, plan: StartPlan = StartPlan(),
                      settings: so.SolverSettings = so.SolverSettings(), limits: PassiveLimits = MINIMAL_EFFORT,
                      warm: list[tuple[str, np.ndarray]] = (), index: int = 0):
    """(best checked StaticSolution, LocalOptima) of :func:`sim.analysis.static_opt.solve_static` over the
    starts of :func:`static_starts`; raises the last StaticOptError when no start passes the checks."""
    optima = LocalOptima(lower_is_better=True)
    solve = _static_solver(model, posture, loads, criterion, gh_limit, settings, limits)
    best = solve_from_starts(solve, lambda s: s.cost, static_starts(model, posture, plan, index, limits, warm),
                             optima, so.StaticOptError)
    return best, optima


def solve_trajectory(model: Das3Model, postures: list, loads=None, criterion: str = "b",
                     gh_limit: float | None = 0.0, plan: StartPlan = StartPlan(),
                     settings: so.SolverSettings = so.SolverSettings(), limits: PassiveLimits = MINIMAL_EFFORT):
    """Per posture (best StaticSolution or StaticOptError, LocalOptima): every posture from its starts and
    the previous posture's solution, then one backward pass warm-started from the next posture's."""
    results = []
    for i, posture in enumerate(postures):
        warm = _warm(results, i - 1, "previous posture")
        results.append(_static_or_error(model, posture, loads, criterion, gh_limit, plan, settings, limits, warm, i))
    for i in range(len(postures) - 2, -1, -1):
        warm = _warm(results, i + 1, "next posture")
        if not warm:
            continue
        best, optima = results[i]
        solve = _static_solver(model, postures[i], loads, criterion, gh_limit, settings, limits)
        try:
            candidate = solve_from_starts(solve, lambda s: s.cost, warm, optima, so.StaticOptError)
        except so.StaticOptError:
            continue
        if isinstance(best, so.StaticOptError) or candidate.cost < best.cost:
            results[i] = (candidate, optima)
    return results


def _warm(results: list, j: int, label: str) -> list:
    if 0 <= j < len(results) and isinstance(results[j][0], so.StaticSolution):
        return [(label, results[j][0].x[:N_DOF])]
    return []


def _static_or_error(model, posture, loads, criterion, gh_limit, plan, settings, limits, warm, index):
    try:
        return solve_static_best(model, posture, loads, criterion, gh_limit, plan, settings, limits, warm, index)
    except so.StaticOptError as exc:
        return exc, LocalOptima(lower_is_better=True)


MAX_DEFAULT_WORKERS = 2
"""Default ceiling: a sweep's continuation passes are one sequential chain of solves, so past two workers the
chain, not the core count, sets the time."""

MAX_WORKERS = 64

_WORKER_MODEL = None


def default_workers() -> int:
    """The CPU count, at most :data:`MAX_DEFAULT_WORKERS`."""
    return max(1, min(MAX_DEFAULT_WORKERS, os.cpu_count() or 1))


def _load_worker(model) -> None:
    global _WORKER_MODEL
    _WORKER_MODEL = model


def _run_in_worker(job: Callable, args: tuple):
    return job(_WORKER_MODEL, *args)


class SolvePool:
    """``submit(job, *args)`` -> ticket; ``result(ticket)`` -> ``job(model, *args)``. Jobs are module-level
    functions with picklable arguments that return (not raise) their expected failures."""

    def __init__(self, model, workers: int = 1) -> None:
        if not 1 <= workers <= MAX_WORKERS:
            raise ValueError(f"workers must be in 1..{MAX_WORKERS}")
        self.model, self.workers = model, workers
        self._executor = None
        if workers > 1:
            self._executor = ProcessPoolExecutor(workers, initializer=_load_worker, initargs=(model,))
        self._calls: list[tuple[Callable, tuple]] = []
        self._urgent: deque[int] = deque()
        self._queued: deque[int] = deque()
        self._running: dict[int, Future] = {}
        self._done: dict[int, object] = {}

    def __enter__(self) -> "SolvePool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None

    def submit(self, job: Callable, *args, urgent: bool = False) -> int:
        ticket = len(self._calls)
        self._calls.append((job, args))
        (self._urgent if urgent else self._queued).append(ticket)
        self._fill()
        return ticket

    def result(self, ticket: int):
        """The job's return value (its exception propagates), run here when there is one worker."""
        if self._executor is None:
            if ticket not in self._done:
                job, args = self._calls[ticket]
                self._done[ticket] = job(self.model, *args)
            return self._done[ticket]
        while ticket not in self._done:
            if ticket in self._queued:            # needed now: first in line
                self._queued.remove(ticket)
                self._urgent.appendleft(ticket)
            self._fill()
            if not self._running:
                raise RuntimeError(f"job {ticket} is neither done nor running")
            finished, _ = wait(list(self._running.values()), return_when=FIRST_COMPLETED)
            for t, future in list(self._running.items()):
                if future in finished:
                    self._done[t] = future.result()
                    del self._running[t]
        return self._done[ticket]

    def _fill(self) -> None:
        """Start waiting jobs, urgent ones first, until ``workers`` run."""
        if self._executor is None:
            return
        while len(self._running) < self.workers and (self._urgent or self._queued):
            ticket = (self._urgent or self._queued).popleft()
            job, args = self._calls[ticket]
            self._running[ticket] = self._executor.submit(_run_in_worker, job, args)
