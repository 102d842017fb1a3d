"""``hil analyze max-moment``: maximum isometric moments of Chadwick et al. 2014 Figs. 4-8 (numerics in
:mod:`sim.analysis.max_moment`, files in :mod:`hil.reports.max_moment_output`)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Optional

import typer

from hil.cli.analyze.options import (
    POSTURE_RANGES_DEG,
    ConoidElongationMm,
    ContactEMin,
    GirdleRanges,
    RandomStarts,
    Seed,
    Workers,
    finish_checked,
    optima_note,
    parse_angles,
    parse_limits,
    report_solution,
    start_plan,
    sweep_workers,
)
from hil.cli.common import BadInputError, error, load_model_options, user_errors


def max_moment(
    task: Annotated[str, typer.Option(help="shoulder-flexion, shoulder-extension, abduction, adduction, "
                                           "internal-rotation, external-rotation, elbow-flexion, "
                                           "elbow-extension, pronation, supination, or all.")],
    out: Annotated[Path, typer.Option(help="Output directory (created); also summary.csv (ratios to the "
                                           "published data).")],
    angles: Annotated[Optional[str], typer.Option(help="START:STOP:STEP of the swept angle, deg "
                                                       "(default: the task's).")] = None,
    gh_limit: Annotated[float, typer.Option(help="GH stability limit.")] = 0.0,
    random_starts: RandomStarts = 2,
    seed: Seed = 0,
    contact_e_min: ContactEMin = "rest",
    conoid_elongation_mm: ConoidElongationMm = "7.7",
    girdle_ranges: GirdleRanges = "authors",
    workers: Workers = None,
    model_config: Annotated[Optional[Path], typer.Option(help="Model options TOML.")] = None,
) -> None:
    """Maximum isometric moment of a task over its angle range (Chadwick 2014 §II-F, Figs. 4-8), each angle
    from several starts with continuation along the angles: CSVs (maxima, passive loads, optima found, full
    states) and figure; exits 1 if any angle has no solution that passes the checks."""
    from hil.reports.max_moment_output import plot_overview, summary_row, write_max_moment, write_summary
    from sim.analysis.max_moment import TASKS, SweepSettings, sweep
    from sim.analysis.static_opt import StaticOptError
    from sim.das3.model import load_model

    with user_errors():
        if task != "all" and task not in TASKS:
            raise BadInputError(f"--task must be 'all' or one of {', '.join(TASKS)}")
        names = list(TASKS) if task == "all" else [task]
        chosen = {name: parse_angles(angles or ":".join(f"{v:g}" for v in TASKS[name].default_angles_deg))
                  for name in names}
        for name, angles_rad in chosen.items():
            _check_swept(name, TASKS[name].swept, angles_rad)
        settings = SweepSettings(plan=start_plan(random_starts, seed), gh_limit=gh_limit,
                                 limits=parse_limits(contact_e_min, conoid_elongation_mm, girdle_ranges),
                                 workers=sweep_workers(workers))
        model = load_model(load_model_options(model_config))
        out.mkdir(parents=True, exist_ok=True)
        failed, summary, sweeps = 0, [], {}
        for name, angles_rad in chosen.items():
            results = sweep(model, TASKS[name], angles_rad, settings)
            _report_max_moments(name, angles_rad, results, settings.plan)
            write_max_moment(out, name, TASKS[name], angles_rad, results, settings.plan.tolerance)
            summary.append(summary_row(name, angles_rad, results, settings.plan.tolerance))
            sweeps[name] = (TASKS[name], angles_rad, results)
            failed += sum(isinstance(r, StaticOptError) for r in results)
        write_summary(out / "summary.csv", summary)
        if len(sweeps) > 1:
            plot_overview(out / "overview.png", sweeps)
        finish_checked(failed, f"{failed} angles", str(out))


SWEPT_POSTURE_KEY = {"elevation": "elevation_deg", "axial_rotation": "axial_rotation_deg", "elbow_flexion": "elbow_deg",
                     "pronation": "pronation_deg"}


def _check_swept(task: str, swept: str, angles_rad) -> None:
    """The swept angles of ``task`` within their coordinate's range (:data:`POSTURE_RANGES_DEG`), else one line."""
    _, lo, hi = POSTURE_RANGES_DEG[SWEPT_POSTURE_KEY[swept]]
    degrees = [math.degrees(a) for a in angles_rad]
    if min(degrees) < lo or max(degrees) > hi:
        raise BadInputError(f"--angles of {task}: the {swept.replace('_', ' ')} angles must lie within {lo:g} and "
                            f"{hi:g} deg, not {min(degrees):g} to {max(degrees):g}")


def _report_max_moments(task: str, angles_rad, results: list, plan) -> None:
    for angle, r in zip(angles_rad, results):
        sol = r.solution              # a MaxMomentPoint or the StaticOptError of a failed angle
        if sol is None:
            error(f"{task} at {math.degrees(angle):g} deg: {r}")
        else:
            optima = getattr(r, "optima", None)
            note = "" if optima is None else f" ({optima_note(optima, plan)})"
            report_solution(sol, f"{task} at {math.degrees(angle):g} deg{note}: moment {sol.cost:.2f} N m")
