"""Files of ``hil analyze criteria``: ``criteria.csv`` (one row per elevation x criterion x GH constraint)
and ``criteria.png`` in the form of van der Helm (1994) Fig. 8 (one panel per muscle group, force as % of
maximal force, the criteria as his caption's line styles) plus a panel of the GH-constraint effect.

Angles in the files are degrees (columns end in ``_deg``), forces N.
"""
from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

from hil.reports.run_report import pyplot_agg, save_png
from sim.analysis.criteria import (
    EMG_GROUPS,
    CriteriaPoint,
    gh_effect,
    group_indices,
    percent_of_max,
    rotator_cuff_force,
)
from sim.das3.layout import GIRDLE_NAMES
from sim.output_file import output_file

LINE_STYLES = {"a": "-", "b": ":", "c": "--", "d": "-."}
"""van der Helm (1994) Fig. 8 caption: (a) solid, (b) dotted, (c) dashed, (d) long dash (here dash-dot)."""
CRITERION_LABELS = {"a": "(a) min sum F^2", "b": "(b) min sum (F/PCSA)^2", "c": "(c) min sum (F/Fmax(l))^2",
                    "d": "(d) min max F/PCSA"}


def csv_rows(points: list[CriteriaPoint], model) -> list[dict]:
    """One dict per point: posture, criterion, GH constraint, checks, cost, cuff force, group % of max."""
    groups = group_indices(model)
    rows = []
    for p in points:
        sol = p.solution
        row = {"elevation_deg": math.degrees(p.elevation), "criterion": p.criterion,
               "gh_constraint": "off" if p.gh_limit is None else "on", "passed": p.passed,
               "cost": "" if sol is None else sol.cost,
               "gh_stability": "" if sol is None else sol.gh_stability,
               "gh_constraint_active": sol is not None and "gh_stability" in sol.active,
               "rotator_cuff_N": "" if sol is None else rotator_cuff_force(model, sol.force)}
        row.update({f"{n}_deg": math.degrees(v) for n, v in zip(GIRDLE_NAMES, p.girdle)})
        row["scapula_from_rhythm_deg"] = math.degrees(p.from_rhythm)
        row.update({f"{g}_pct_max": "" if sol is None else percent_of_max(model, sol.force, idx)
                    for g, idx in groups.items()})
        row["error"] = p.error
        rows.append(row)
    return rows


def write_criteria(out_dir: Path, points: list[CriteriaPoint], model, title: str) -> tuple[Path, Path]:
    """``criteria.csv`` and ``criteria.png`` in ``out_dir``; returns their paths."""
    rows = csv_rows(points, model)
    csv_path, png_path = out_dir / "criteria.csv", out_dir / "criteria.png"
    with output_file(csv_path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    plot_criteria(png_path, points, model, title)
    return csv_path, png_path


def plot_criteria(path: Path, points: list[CriteriaPoint], model, title: str) -> None:
    """Fig. 8 form: a panel per EMG group (criteria with the GH constraint) and the GH-effect panel."""
    plt = pyplot_agg()
    groups = group_indices(model)
    n = len(groups) + 1
    cols = 4
    fig, axes = plt.subplots(math.ceil(n / cols), cols, figsize=(4 * cols, 3 * math.ceil(n / cols)), squeeze=False)
    flat = axes.ravel()
    for ax, (g, idx) in zip(flat, groups.items()):
        for c, style in LINE_STYLES.items():
            pts = [p for p in points if p.criterion == c and p.gh_limit is not None and p.passed]
            if pts:
                ax.plot([math.degrees(p.elevation) for p in pts],
                        [percent_of_max(model, p.solution.force, idx) for p in pts], style, color="k",
                        label=CRITERION_LABELS[c])
        ax.set_title(f"{g}: {EMG_GROUPS[g]}", fontsize=9)
        ax.set_ylabel("force (% of max)")
        ax.grid(alpha=0.3)
    flat[0].legend(fontsize=7)
    _gh_panel(flat[len(groups)], gh_effect(model, points))
    for ax in flat[n:]:
        ax.axis("off")
    for ax in flat[:n]:
        ax.set_xlabel("thoracohumeral elevation (deg)")
    fig.suptitle(title, fontsize=10)
    save_png(plt, fig, str(path))


def _gh_panel(ax, rows: list[dict]) -> None:
    """Rotator-cuff force of criterion (b) with and without the GH constraint; marks where it is active."""
    if not rows:
        ax.set_title("GH constraint: no elevation solved both ways", fontsize=9)
        return
    e = np.degrees([r["elevation"] for r in rows])
    ax.plot(e, [r["cuff_with_N"] for r in rows], "k-", label="(b) with GH constraint")
    ax.plot(e, [r["cuff_without_N"] for r in rows], "k:", label="(b) without")
    active = [r for r in rows if r["active"]]
    if active:
        ax.plot(np.degrees([r["elevation"] for r in active]), [r["cuff_with_N"] for r in active], "ro",
                label="constraint active")
    ax.set_title("rotator cuff (supra, infra, subscap, termin)", fontsize=9)
    ax.set_ylabel("force (N)")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
