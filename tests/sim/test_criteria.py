"""van der Helm (1994) conditions (sim.analysis.criteria): a girdle prescribed by a shoulder rhythm is held
exactly, the solution passes the plant's own check, and the four criteria and the GH effect are reported."""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from sim.analysis import criteria as cr
from sim.analysis import static_opt as so
from sim.analysis.rhythm import load_rhythm
from sim.das3.model import MUS_FMAX

DEG = math.pi / 180


@pytest.fixture(scope="module")
def posture(model):
    return cr.rhythm_posture(model, load_rhythm("degroot2001-das3rest", model), 0.0, 30 * DEG)


@pytest.fixture(scope="module")
def points(model, posture):
    return cr.sweep(model, [posture], criteria=("b", "d"), from_rhythm=[0.1])


def test_a_prescribed_girdle_van_der_helm_case_solves_and_holds_the_girdle(model, posture):
    sol = so.solve_static(model, posture, criterion="b", gh_limit=0.0)
    assert np.array_equal(sol.x[list(so.GIRDLE_DOFS)], np.asarray(posture.girdle))
    checks = so.check_state(model, sol.x, posture, None, 0.0)
    assert checks.passed, checks.failures
    assert checks.eom_max_nm <= 1e-6 and math.degrees(checks.posture_max_rad) <= 1e-4


def test_the_sweep_solves_each_criterion_and_criterion_b_without_the_gh_constraint(model, points):
    assert [(p.criterion, p.gh_limit) for p in points] == [("b", 0.0), ("d", 0.0), ("b", None)]
    assert all(p.passed for p in points), [p.error for p in points]
    assert all(p.from_rhythm == 0.1 for p in points)
    for p in points:
        assert so.check_state(model, p.solution.x, so.Posture(0.0, p.elevation, 0.0, cr.ELBOW_REST,
                                                               cr.PRONATION_REST, tuple(p.girdle)), None,
                              p.gh_limit).passed


def test_criterion_d_caps_the_largest_stress_of_criterion_b(model, points):
    stress = {p.criterion: np.max(p.solution.force / model.arrays.mus[:, MUS_FMAX]) for p in points if p.gh_limit == 0.0}
    assert stress["d"] <= stress["b"] + 1e-9


def test_group_percentages_and_the_gh_effect(model, points):
    groups = cr.group_indices(model)
    assert list(groups) == list(cr.EMG_GROUPS) and all(groups.values())
    fmax = model.arrays.mus[:, MUS_FMAX]
    one = np.zeros(len(fmax))
    one[groups["biceps"]] = fmax[groups["biceps"]]
    assert cr.percent_of_max(model, one, groups["biceps"]) == pytest.approx(100.0)
    rows = cr.gh_effect(model, points)
    assert len(rows) == 1 and rows[0]["cuff_with_N"] > 0
    assert rows[0]["stability_with"] <= 1e-6
    assert rows[0]["active"] == ("gh_stability" in points[0].solution.active)


def test_gh_effect_flags_an_active_constraint(model):
    """A constrained solution at the limit is reported active, with both rotator-cuff forces."""
    force = np.zeros(len(model.muscle_names))

    def point(limit, active):
        sol = SimpleNamespace(force=force + (50.0 if limit is not None else 10.0), gh_stability=0.0, active=active)
        return cr.CriteriaPoint(0.5, "b", limit, np.zeros(6), sol, "")

    rows = cr.gh_effect(model, [point(0.0, ["gh_stability"]), point(None, [])])
    assert rows[0]["active"] and rows[0]["cuff_with_N"] > rows[0]["cuff_without_N"] > 0
