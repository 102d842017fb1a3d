"""van der Helm (1994) Fig. 8 under his conditions: the four optimisation criteria side by side over humeral
elevation with the girdle prescribed by a shoulder rhythm (:mod:`sim.analysis.rhythm`), and the effect of
the GH stability constraint (his "Inverse dynamics": "If the constraint is working, in this simulation at 0
and 30 deg of humeral abduction, especially the antagonistic muscles of the rotator cuff become active").

Forces are shown per DAS3 muscle group as sum F / sum Fmax (percent), for the groups nearest his 12
surface-EMG spots (his Table 3); where two spots lie on one DAS3 group (trapezius p. transversalis and
p. ascendens on ``trapscap``, deltoid p. medialis and p. posterior on ``deltscap``) the group is shown once.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from sim.analysis.rhythm import Rhythm, fit_to_model
from sim.analysis.static_opt import CRITERIA, Posture, StaticOptError, StaticSolution, solve_static
from sim.das3.model import MUS_FMAX, Das3Model
from sim.das3.muscle_groups import group_members

EMG_GROUPS = {
    "trapclav": "trapezius p. descendens",
    "trapscap": "trapezius p. transversalis + ascendens",
    "deltclav": "deltoideus p. anterior",
    "deltscap": "deltoideus p. medialis + posterior",
    "infra": "infraspinatus",
    "serrant": "serratus anterior",
    "latdorsi": "latissimus dorsi",
    "pectmajc": "pectoralis major p. clavicularis",
    "pectmajt": "pectoralis major p. thoracalis",
    "biceps": "biceps caput breve + longum",
}
"""DAS3 group (``biceps`` = ``bicl`` + ``bicb``) -> van der Helm (1994) Table 3 EMG spot(s)."""
ROTATOR_CUFF = ("supra", "infra", "subscap", "termin")
"""The rotator cuff: supraspinatus, infraspinatus, subscapularis, teres minor."""
ELBOW_REST, PRONATION_REST = math.radians(37.64), math.radians(81.44)
"""Elbow flexion and pronation of the model's published rest posture (``das3_equilibrium.json``)."""


@dataclass
class CriteriaPoint:
    """One posture solved with one criterion, with (gh_limit 0) or without (None) the GH constraint."""

    elevation: float                     # rad
    criterion: str
    gh_limit: float | None
    girdle: np.ndarray                   # (6,) rad, as held
    solution: StaticSolution | None      # None if the posture could not be set up
    error: str                           # "" if the solution passed check_state
    from_rhythm: float = math.nan        # rad, scapula orientation held vs the published rhythm's

    @property
    def passed(self) -> bool:
        return self.solution is not None and not self.error


def group_indices(model: Das3Model) -> dict[str, list[int]]:
    """EMG group -> element indices."""
    groups = group_members(model.muscle_names)
    out = {g: groups[g] for g in EMG_GROUPS if g != "biceps"}
    out["biceps"] = groups["bicl"] + groups["bicb"]
    return {g: out[g] for g in EMG_GROUPS}


def percent_of_max(model: Das3Model, force: np.ndarray, indices: list[int]) -> float:
    """100 sum F / sum Fmax over the elements."""
    fmax = np.asarray(model.arrays.mus[:, MUS_FMAX])
    return float(100.0 * np.sum(force[indices]) / np.sum(fmax[indices]))


def rotator_cuff_force(model: Das3Model, force: np.ndarray) -> float:
    """Sum of the rotator-cuff forces, N."""
    groups = group_members(model.muscle_names)
    return float(sum(np.sum(force[groups[g]]) for g in ROTATOR_CUFF))


def rhythm_posture(model: Das3Model, rhythm: Rhythm, plane: float, elevation: float, start=None) -> Posture:
    """The posture at (plane, elevation) with the rhythm's girdle fitted to the model
    (:func:`sim.analysis.rhythm.fit_to_model`, from ``start``), no axial rotation, elbow and forearm as at rest."""
    girdle = fit_to_model(model, rhythm.girdle(plane, elevation), start)
    return Posture(plane, elevation, 0.0, ELBOW_REST, PRONATION_REST, tuple(float(v) for v in girdle))


def solve_point(model: Das3Model, posture: Posture, criterion: str, gh_limit: float | None) -> CriteriaPoint:
    """One checked solution (a failed check is kept with its message, not raised)."""
    girdle = np.asarray(posture.girdle)
    try:
        sol = solve_static(model, posture, None, criterion, gh_limit)
        return CriteriaPoint(posture.elevation, criterion, gh_limit, girdle, sol, "")
    except StaticOptError as exc:
        return CriteriaPoint(posture.elevation, criterion, gh_limit, girdle, exc.solution, str(exc.args[0]))


def sweep(model: Das3Model, postures: list[Posture], criteria=CRITERIA, from_rhythm=None) -> list[CriteriaPoint]:
    """Every posture (girdle held, e.g. from :func:`rhythm_posture`) x criterion with the GH constraint
    (limit 0, the glenoid rim), and criterion (b) also without it. With the whole q held the unknowns are
    the activations alone, so each posture is solved on its own (no warm start carries over).
    ``from_rhythm``: per posture, the held scapula's deviation from the rhythm (rad), carried to the points."""
    points = []
    for k, posture in enumerate(postures):
        here = [solve_point(model, posture, c, 0.0) for c in criteria] + [solve_point(model, posture, "b", None)]
        for p in here:
            p.from_rhythm = math.nan if from_rhythm is None else float(from_rhythm[k])
        points += here
    return points


def gh_effect(model: Das3Model, points: list[CriteriaPoint]) -> list[dict]:
    """Per elevation, criterion (b) with and without the GH constraint: rotator-cuff force (N), GH
    stability, and whether the constraint is active (the constrained solution at the limit)."""
    rows = []
    by_key = {(p.elevation, p.criterion, p.gh_limit): p for p in points}
    for elevation in sorted({p.elevation for p in points}):
        with_gh, without = by_key.get((elevation, "b", 0.0)), by_key.get((elevation, "b", None))
        if not (with_gh and without and with_gh.passed and without.passed):
            continue
        rows.append({"elevation": elevation,
                     "cuff_with_N": rotator_cuff_force(model, with_gh.solution.force),
                     "cuff_without_N": rotator_cuff_force(model, without.solution.force),
                     "stability_with": with_gh.solution.gh_stability,
                     "stability_without": without.solution.gh_stability,
                     "active": "gh_stability" in with_gh.solution.active})
    return rows
