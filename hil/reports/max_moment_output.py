"""Files of ``hil analyze max-moment``: per task a CSV of the maxima with the passive loads, girdle angles,
active constraints and the local optima the starts found; a CSV of the full states (so any tool can re-check
a point with the plant's residual); and a figure in the form of Chadwick et al. 2014 Figs. 4-8 with a
fourth panel for the passive loads.

Angles in the files are degrees (columns end in ``_deg``), moments N m, forces N.
"""
from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

from hil.reports.analysis_output import GIRDLE_COLUMNS
from hil.reports.run_report import pyplot_agg, save_png
from sim.analysis.literature import literature_curves, study_ratios, within_spread
from sim.analysis.max_moment import MaxMomentPoint
from sim.das3.model import LOAD_NAMES, N_STATES
from sim.output_file import output_file

MAX_MOMENT_COLUMNS = ("angle_deg", "moment_Nm", "gh_stability", *GIRDLE_COLUMNS, "contact_E_TS", "contact_E_AI",
                      "contact_force_TS_N", "contact_force_AI_N", "conoid_force_N", "gh_force_N",
                      "active_constraints", "best_start", "optima", "optima_gap", "flagged", "iterations",
                      "solve_time_s", "eom_residual_max_Nm", "checks_passed", "failures")
MOMENT_COLUMNS = tuple(f"{name}_Nm" for name in LOAD_NAMES[:5])
STATE_COLUMNS = ("angle_deg", *MOMENT_COLUMNS, *(f"x{i:03d}" for i in range(N_STATES)))


def write_max_moment(out_dir: Path, task_name: str, task, angles_rad, results: list, tolerance: float) -> Path:
    """``max_moment_<task>.csv``, ``max_moment_<task>_states.csv`` and ``max_moment_<task>.png``; returns the
    first. ``tolerance``: the relative gap between the best two optima above which a point is flagged."""
    path = out_dir / f"max_moment_{task_name}.csv"
    with output_file(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(MAX_MOMENT_COLUMNS)
        for angle, r in zip(angles_rad, results):
            w.writerow(_row(angle, r, tolerance))
    with output_file(out_dir / f"max_moment_{task_name}_states.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(STATE_COLUMNS)
        for angle, r in zip(angles_rad, results):
            if isinstance(r, MaxMomentPoint):
                w.writerow([f"{math.degrees(angle):.6f}", *(repr(float(v)) for v in r.solution.moments),
                            *(repr(float(v)) for v in r.solution.x)])
    plot_max_moment(out_dir / f"max_moment_{task_name}.png", task_name, task, angles_rad, results)
    return path


def _row(angle: float, r, tolerance: float) -> list:
    """One CSV row; a failed angle (StaticOptError) keeps its best point's values when it has one."""
    sol = r.solution
    if sol is None:
        blank = ["nan"] * (len(MAX_MOMENT_COLUMNS) - 4)
        return [f"{math.degrees(angle):.4f}", *blank, "nan", False, str(r)]
    c, optima = sol.checks, getattr(r, "optima", None)
    passive = [x for x in sol.active if not x.startswith("force_max:")]
    found = "" if optima is None else "; ".join(f"{label}={value:.3f}" for label, value in optima.ranked())
    gap = "nan" if optima is None else f"{optima.gap:.4f}"
    flagged = optima is not None and optima.flagged(tolerance)
    return [f"{math.degrees(angle):.4f}", f"{sol.cost:.6f}", f"{sol.gh_stability:.6f}",
            *np.degrees(sol.x[:6]).round(4), f"{c.contact_e[0]:.6f}", f"{c.contact_e[1]:.6f}",
            *(f"{v:.2f}" for v in np.linalg.norm(sol.contact_force, axis=1)), f"{c.conoid_force_n:.2f}",
            f"{np.linalg.norm(sol.gh_force):.2f}", "; ".join(passive), getattr(r, "warm_start", ""), found, gap,
            flagged, sol.iterations, f"{sol.time_s:.3f}", f"{c.eom_max_nm:.3g}", c.passed, "; ".join(c.failures)]


def plot_max_moment(path: Path, task_name: str, task, angles_rad, results: list) -> None:
    """Panels A-C of Chadwick Figs. 4-8 (moment with the published data, clavicle and scapula angles) and
    D: contact and conoid forces. Flagged points (two optima apart) are ringed."""
    plt = pyplot_agg()
    ok = [(math.degrees(a), r) for a, r in zip(angles_rad, results) if isinstance(r, MaxMomentPoint)]
    fig, axes = plt.subplots(4, 1, figsize=(6, 12.5), sharex=True)
    _plot_literature(axes[0], task_name)
    if ok:
        x = np.array([a for a, _ in ok])
        axes[0].plot(x, [r.moment_nm for _, r in ok], "ro-", lw=2, label="model")
        _plot_girdle(axes[1], axes[2], x, np.degrees([r.girdle_rad for _, r in ok]))
        _plot_passive(axes[3], x, [r.solution for _, r in ok])
    axes[0].set_ylabel("maximum moment (N m)")
    axes[0].set_title(f"{task_name}: model and published data (posture of Chadwick 2014 {task.figure})",
                      fontsize=9)
    axes[3].set_xlabel(f"{task.swept.replace('_', ' ')} (deg)")
    for ax in axes:
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    save_png(plt, fig, path)


def _plot_girdle(clavicle_ax, scapula_ax, x: np.ndarray, girdle_deg: np.ndarray) -> None:
    for j, name in enumerate(("SCy", "SCz", "SCx")):
        clavicle_ax.plot(x, girdle_deg[:, j], "o-", ms=3, label=name)
    for j, name in enumerate(("ACy", "ACz", "ACx"), start=3):
        scapula_ax.plot(x, girdle_deg[:, j], "o-", ms=3, label=name)
    clavicle_ax.set_ylabel("clavicle angles (deg)")
    scapula_ax.set_ylabel("scapula angles (deg)")


def _plot_passive(ax, x: np.ndarray, solutions: list) -> None:
    contact = np.array([np.linalg.norm(s.contact_force, axis=1) for s in solutions])
    ax.plot(x, contact[:, 0], "s-", ms=3, label="contact TS")
    ax.plot(x, contact[:, 1], "^-", ms=3, label="contact AI")
    ax.plot(x, [s.checks.conoid_force_n for s in solutions], "o-", ms=3, label="conoid")
    ax.set_ylabel("passive loads (N)")


def _plot_literature(ax, task_name: str) -> None:
    """The published curves Chadwick compares with (thin grey, with their spread where given)."""
    styles = ("--", ":", "-.", (0, (1, 3)), (0, (5, 2, 1, 2)))
    for k, curve in enumerate(literature_curves(task_name)):
        x = np.degrees(curve.angle_rad)
        spread = None if np.isnan(curve.below_nm).all() else np.vstack([curve.below_nm, curve.above_nm])
        ax.errorbar(x, curve.moment_nm, yerr=spread, color="0.35", lw=1, capsize=2,
                    linestyle=styles[k % len(styles)], label=curve.label)


SUMMARY_COLUMNS = ("task", "angles_deg", "model_min_Nm", "model_max_Nm", "within_spread", "flagged",
                   "study_ratios")


def summary_row(task_name: str, angles_rad, results: list, tolerance: float) -> list:
    """One ``summary.csv`` row: the model's range, how many angles lie within the published spread +-20 %
    (:func:`sim.analysis.literature.within_spread`), flagged angles and model/study ratio ranges."""
    ok = [(a, r) for a, r in zip(angles_rad, results) if isinstance(r, MaxMomentPoint)]
    if not ok:
        return [task_name, "", "nan", "nan", f"0/{len(results)}", "", ""]
    angles = np.array([a for a, _ in ok])
    moments = np.array([r.moment_nm for _, r in ok])
    inside = within_spread(task_name, angles, moments)
    flagged = sum(r.optima is not None and r.optima.flagged(tolerance) for _, r in ok)
    ratios = "; ".join(f"{s.label}: {s.ratio_min:.2f}-{s.ratio_max:.2f}" for s in study_ratios(task_name, angles, moments)
                       if math.isfinite(s.ratio_min))
    degrees = np.degrees(angles)
    return [task_name, f"{degrees.min():g}..{degrees.max():g}", f"{moments.min():.1f}", f"{moments.max():.1f}",
            f"{int(inside.sum())}/{len(results)}", flagged, ratios]


def write_summary(path: Path, rows: list) -> None:
    with output_file(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(SUMMARY_COLUMNS)
        w.writerows(rows)


def plot_overview(path: Path, sweeps: dict) -> None:
    """Panel A of every task side by side (model red, published data grey): ``sweeps`` maps task name ->
    (task, angles_rad, results)."""
    plt = pyplot_agg()
    n = len(sweeps)
    cols = 2 if n > 1 else 1
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 2.6 * rows), squeeze=False)
    for ax, (name, (task, angles_rad, results)) in zip(axes.flat, sweeps.items()):
        _plot_literature(ax, name)
        ok = [(math.degrees(a), r.moment_nm) for a, r in zip(angles_rad, results) if isinstance(r, MaxMomentPoint)]
        if ok:
            ax.plot(*zip(*ok), "ro-", lw=2, ms=3, label="model")
        ax.set_title(f"{name} ({task.figure})", fontsize=9)
        ax.set_xlabel(f"{task.swept.replace('_', ' ')} (deg)", fontsize=8)
        ax.set_ylabel("N m", fontsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    save_png(plt, fig, path)
