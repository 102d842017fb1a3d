"""Published maximum isometric moments (the data Chadwick et al. 2014 plot in Figs. 4-8,
``sim/data/isometric_moments_literature.csv``) and the model's standing against them.

A study's curve is compared only at the model's angles inside the study's own angle range (linear
interpolation between its points). The experimental spread at an angle is the band from the lowest to the
highest study there; the goal of issue 36 is the model inside that band widened by ``margin`` (20 %).
"""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from importlib import resources

import numpy as np

LITERATURE_SOURCES = {
    "Garner2001": "Garner & Pandy 2001 [15]",
    "Otis1990": "Otis et al. 1990 [16]",
    "Engin1980": "Engin & Kaleps 1980 [17]",
    "Winters1993": "Winters & Kleweno 1993 [18]",
    "Amis1980": "Amis et al. 1980 [19]",
    "Buchanan1998": "Buchanan et al. 1998 [20]",
}
"""Citation labels (reference numbers of Chadwick et al. 2014) of ``sim/data/isometric_moments_literature.csv``."""


@dataclass(frozen=True)
class LiteratureCurve:
    """Published maximum moments for one task from one source (as plotted in Chadwick Figs. 4-8);
    ``below_nm``/``above_nm`` the published spread, NaN where the source gives none."""

    source: str                 # a LITERATURE_SOURCES key, with ":k" for one of several series
    angle_rad: np.ndarray
    moment_nm: np.ndarray
    below_nm: np.ndarray
    above_nm: np.ndarray

    @property
    def label(self) -> str:
        key, _, series = self.source.partition(":")
        return LITERATURE_SOURCES[key] + (f" series {series}" if series else "")


def literature_curves(task_name: str) -> list[LiteratureCurve]:
    """The published curves for ``task_name`` (a :data:`sim.analysis.max_moment.TASKS` key; none for
    another name), in file order."""
    text = resources.files("sim.data").joinpath("isometric_moments_literature.csv").read_text(encoding="utf-8")
    rows: dict[str, list] = {}
    for row in csv.DictReader(text.splitlines()):
        if row["task"] == task_name:
            rows.setdefault(row["source"], []).append(row)

    def column(points, name):
        return np.array([float(p[name]) if p[name] else math.nan for p in points])

    return [LiteratureCurve(source, np.radians(column(points, "angle_deg")), column(points, "moment_Nm"),
                            column(points, "below_Nm"), column(points, "above_Nm"))
            for source, points in rows.items()]


@dataclass(frozen=True)
class StudyRatio:
    """Model / study over the model's angles inside the study's range (NaN when none is)."""

    label: str
    ratio_min: float
    ratio_max: float


def study_ratios(task_name: str, angles_rad, moments_nm) -> list[StudyRatio]:
    """One StudyRatio per published curve of ``task_name``."""
    angles, moments = np.asarray(angles_rad, float), np.asarray(moments_nm, float)
    ratios = []
    for curve in literature_curves(task_name):
        inside = (angles >= curve.angle_rad.min() - 1e-9) & (angles <= curve.angle_rad.max() + 1e-9)
        if not inside.any():
            ratios.append(StudyRatio(curve.label, math.nan, math.nan))
            continue
        r = moments[inside] / np.interp(angles[inside], curve.angle_rad, curve.moment_nm)
        ratios.append(StudyRatio(curve.label, float(r.min()), float(r.max())))
    return ratios


def spread_band(task_name: str, angles_rad) -> tuple[np.ndarray, np.ndarray]:
    """(lowest, highest) published value at each angle over the studies covering it (NaN where none)."""
    angles = np.asarray(angles_rad, float)
    values = np.full((len(literature_curves(task_name)), len(angles)), np.nan)
    for k, curve in enumerate(literature_curves(task_name)):
        inside = (angles >= curve.angle_rad.min() - 1e-9) & (angles <= curve.angle_rad.max() + 1e-9)
        values[k, inside] = np.interp(angles[inside], curve.angle_rad, curve.moment_nm)
    covered = np.isfinite(values).any(axis=0)
    low, high = np.full(len(angles), np.nan), np.full(len(angles), np.nan)
    low[covered], high[covered] = np.nanmin(values[:, covered], axis=0), np.nanmax(values[:, covered], axis=0)
    return low, high


def within_spread(task_name: str, angles_rad, moments_nm, margin: float = 0.2) -> np.ndarray:
    """(n,) bool: lowest (1 - margin) <= model <= highest (1 + margin) at each angle a study covers;
    True where no study does (nothing to compare)."""
    low, high = spread_band(task_name, angles_rad)
    m = np.asarray(moments_nm, float)
    covered = np.isfinite(low)
    ok = np.ones(len(m), bool)
    ok[covered] = (m[covered] >= low[covered] * (1 - margin)) & (m[covered] <= high[covered] * (1 + margin))
    return ok
