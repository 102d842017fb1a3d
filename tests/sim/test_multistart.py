"""Seeded starts and the record of local optima (sim.analysis.multistart)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from sim.analysis.multistart import (
    LocalOptima,
    SolvePool,
    StartPlan,
    best_of_results,
    random_girdles,
    solve_from_starts,
)


def _ranges():
    r = np.tile([-1.0, 1.0], (11, 1))
    r[:6] = [[-0.2, 0.2]] * 6
    return r


def test_random_girdles_are_seeded_clipped_and_leave_the_arm_alone():
    q0 = np.linspace(-0.5, 0.5, 11)
    plan = StartPlan(random_starts=3, seed=5, spread_rad=math.radians(30))
    a, b = random_girdles(q0, _ranges(), plan, 2), random_girdles(q0, _ranges(), plan, 2)
    other = random_girdles(q0, _ranges(), plan, 3)
    assert len(a) == 3 and all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not np.array_equal(a[0], other[0])
    for q in a:
        assert np.all(np.abs(q[:6]) <= 0.2) and np.array_equal(q[6:], q0[6:])


def test_local_optima_rank_and_flag_distinct_basins():
    maxima = LocalOptima(lower_is_better=False)
    for label, value in (("published", 80.0), ("random 0", 100.0), ("angle below", 99.5)):
        maxima.add(label, value)
    assert maxima.best_label == "random 0" and maxima.spread == 20.0
    assert maxima.gap == pytest.approx(0.005) and not maxima.flagged(0.01)
    maxima.add("random 1", 100.0)
    assert maxima.gap == 0.0
    minima = LocalOptima(lower_is_better=True)
    minima.add("a", 10.0)
    minima.add("b", 20.0)
    assert minima.best_label == "a" and minima.flagged(0.01)


class Failed(Exception):
    pass


def test_solve_from_starts_keeps_the_best_and_counts_failures():
    def solve(q):
        if q is not None and q[0] < 0:
            raise Failed("start fails its checks")
        return 0.0 if q is None else float(q[0])

    optima = LocalOptima(lower_is_better=False)
    starts = [("published", None), ("bad", np.full(11, -1.0)), ("good", np.full(11, 2.0))]
    assert solve_from_starts(solve, lambda v: v, starts, optima, Failed) == 2.0
    assert optima.failed == ["bad"] and optima.best_label == "good"
    with pytest.raises(Failed):
        solve_from_starts(solve, lambda v: v, [("bad", np.full(11, -1.0))], LocalOptima(False), Failed)


def test_best_of_results_keeps_the_first_of_equal_optima_and_the_last_failure():
    class Failed(Exception):
        pass

    first, second = Failed("first"), Failed("second")
    optima = LocalOptima(lower_is_better=False)
    results = [("a", first), ("b", [2.0]), ("c", [2.0]), ("d", second), ("e", [1.0])]
    best = best_of_results(results, lambda r: r[0], optima, Failed)
    assert best is results[1][1] and optima.failed == ["a", "d"] and [v for _, v in optima.found] == [2.0, 2.0, 1.0]
    with pytest.raises(Failed, match="second"):
        best_of_results([("a", first), ("d", second)], lambda r: r[0], LocalOptima(False), Failed)


@pytest.mark.parametrize("workers", [1, 2])
def test_pool_returns_each_job_by_its_ticket_whatever_order_it_is_asked(workers):
    """job(model, *args) = pow(model, k); results asked for in reverse order, some jobs urgent."""
    with SolvePool(2, workers) as pool:
        tickets = [pool.submit(pow, k, urgent=k % 3 == 0) for k in range(12)]
        assert [pool.result(t) for t in reversed(tickets)] == [2 ** k for k in reversed(range(12))]
    with pytest.raises(ValueError, match="workers"):
        SolvePool(2, 0)
