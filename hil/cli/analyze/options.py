"""Options shared by the ``hil analyze`` commands: postures, loads, angle ranges, trajectories, the girdle
(a held girdle, ``--girdle`` or trajectory columns, or one from a shoulder rhythm, ``--rhythm``), the passive
limits and the starts, each checked before anything is solved, the one-line report of a solution and the end of a
command whose solutions did not all pass their checks."""
from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Annotated, Optional

import numpy as np
import typer

from hil.cli.common import BadInputError, ExitCode, error, out_console
from hil.reports.analysis_output import GIRDLE_COLUMNS
from sim.das3.config import not_utf8
from sim.input_file import read_input_file

CRITERION_HELP = ("(a) min sum F^2, (b) min sum (F/PCSA)^2, (c) min sum a^2 (= (F_active/(Fmax f_FL))^2), "
                  "(d) min max F/PCSA, then (b) at that maximum (van der Helm 1994).")
PLANE_HELP = "Plane of elevation, deg (0 = coronal/abduction, 45 = scapular plane, 90 = sagittal/forward flexion)."

def parse_loads(items: list[str]) -> np.ndarray:
    """``NAME=VALUE`` items (sim.das3.model.LOAD_NAMES; N, N m, m) -> the 10 loads."""
    from sim.das3.model import LOAD_NAMES

    loads = np.zeros(len(LOAD_NAMES))
    for item in items:
        name, _, value = item.partition("=")
        if name not in LOAD_NAMES:
            raise BadInputError(f"--load {item!r}: name must be one of {', '.join(LOAD_NAMES)}")
        try:
            loads[LOAD_NAMES.index(name)] = float(value)
        except ValueError:
            raise BadInputError(f"--load {item!r}: value must be a number") from None
        if not math.isfinite(loads[LOAD_NAMES.index(name)]):
            raise BadInputError(f"--load {item!r}: value must be finite")
    return loads


def parse_angles(text: str, option: str = "--angles") -> np.ndarray:
    """``START:STOP:STEP`` in degrees (STOP included) -> radians."""
    try:
        start, stop, step = (float(v) for v in text.split(":"))
    except ValueError:
        raise BadInputError(f"{option} {text!r}: expected START:STOP:STEP in degrees") from None
    if not (all(math.isfinite(v) for v in (start, stop, step)) and step > 0 and stop >= start):
        raise BadInputError(f"{option} {text!r}: need finite values, STEP > 0 and STOP >= START")
    n = int(math.floor((stop - start) / step + 1e-9)) + 1
    if n > 1000:
        raise BadInputError(f"{option} {text!r}: {n} angles (at most 1000)")
    return np.radians(start + step * np.arange(n))




POSTURE_RANGES_DEG = {"plane_deg": ("--plane", -90.0, 180.0), "elevation_deg": ("--elevation", 0.0, 180.0),
                      "axial_rotation_deg": ("--axial-rotation", -180.0, 180.0), "elbow_deg": ("--elbow", -180.0, 180.0),
                      "pronation_deg": ("--pronation", -180.0, 180.0)}
"""Each posture angle's coordinate range, deg: the thoracohumeral YZY angles (plane of elevation as ``hil analyze
criteria`` takes it, elevation from hanging to overhead), the others one turn."""


def check_posture(values: dict, where: str | None = None) -> None:
    """Each angle of a posture in degrees (``values``: keys of :data:`POSTURE_RANGES_DEG`, ``girdle_deg`` optional)
    within its range (non-finite ones are left to :class:`sim.analysis.static_opt.Posture`'s check), girdle angles
    within +-180, else one BadInputError line naming the option (``where`` None) or the column at ``where`` (a
    trajectory's line)."""
    for key, value in values.items():
        if key not in POSTURE_RANGES_DEG or value is None or not math.isfinite(value):   # NaN: the posture's own check
            continue
        option, lo, hi = POSTURE_RANGES_DEG[key]
        if not lo <= value <= hi:
            name = option if where is None else f"{where}: {key}"
            raise BadInputError(f"{name} {value:g} deg must lie within {lo:g} and {hi:g} deg")
    if any(abs(v) > 180.0 for v in values.get("girdle_deg") or ()):
        raise BadInputError(f"{where or '--girdle'}: girdle angles must lie within -180 and 180 deg")


def read_trajectory(path: Path, defaults: dict) -> list[dict]:
    """Postures from a CSV with ``elevation_deg`` and optional ``plane_deg``, ``axial_rotation_deg``,
    ``elbow_deg``, ``pronation_deg`` columns (missing ones take the command's options) and optionally all
    six girdle columns ``SCy_deg`` .. ``ACx_deg`` (the girdle held, key ``girdle_deg``)."""
    try:
        text = read_input_file(path).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInputError(f"--trajectory {path}: {not_utf8(exc)}") from None
    rows = list(csv.DictReader(io.StringIO(text, newline="")))
    if not rows or "elevation_deg" not in rows[0]:
        raise BadInputError(f"--trajectory {path}: a CSV with at least an 'elevation_deg' column and one row")
    present = [c for c in GIRDLE_COLUMNS if c in rows[0]]
    if present and len(present) != len(GIRDLE_COLUMNS):
        raise BadInputError(f"--trajectory {path}: give all six girdle columns {', '.join(GIRDLE_COLUMNS)} or none")
    postures = []
    for n, row in enumerate(rows, start=2):
        try:
            values = {k: float(row[k]) if row.get(k) not in (None, "") else defaults[k] for k in defaults}
            girdle = [float(row[c]) for c in present]
        except (TypeError, ValueError):
            raise BadInputError(f"--trajectory {path}, line {n}: values must be numbers") from None
        if not all(math.isfinite(v) for v in [*values.values(), *girdle]):
            raise BadInputError(f"--trajectory {path}, line {n}: values must be finite")
        posture = {**values, "girdle_deg": tuple(girdle) if girdle else None}
        check_posture(posture, f"--trajectory {path}, line {n}")
        postures.append(posture)
    return postures


def report_solution(sol, label: str) -> None:
    """One line: cost, GH stability, iterations, residuals, the active constraints (muscles at full force
    counted, the rest named) and the checks."""
    c = sol.checks
    status = "[green]checks passed[/]" if c.passed else "[red]checks FAILED: " + "; ".join(c.failures) + "[/]"
    full = sum(a.startswith("force_max:") for a in sol.active)
    named = [a for a in sol.active if not a.startswith("force_max:")]
    out_console().print(
        f"{label}: cost {sol.cost:.6g}, GH stability {sol.gh_stability:+.3f}, {sol.iterations} iterations, "
        f"{sol.time_s:.2f} s; residual |f_eom| {c.eom_max_nm:.2g} N m, |g| {c.contraction_max:.2g}, "
        f"a in [{c.activation_range[0]:.3g}, {c.activation_range[1]:.3g}]; active: {', '.join(named) or 'none'}"
        f"{f', {full} at full force' if full else ''}; {status}")


LIMIT_HELP = {
    "contact": "Lower bound on the scapulothoracic contact function E of TS and AI: a number in (-1, 0], "
               "'rest' (as deep as at the published equilibrium) or 'none'.",
    "conoid": "Conoid elongation beyond its rest length, mm (Harris 2000: 7.7 to failure), or 'none'.",
    "ranges": "Girdle ranges: 'authors' (the DAS3 authors' max-moment script) or 'model' (the model file).",
}
RandomStarts = Annotated[int, typer.Option(help="Seeded random girdle starts per posture or angle, besides the "
                                                "published equilibrium and the neighbours.")]
Seed = Annotated[int, typer.Option(help="Seed of the random starts.")]
ContactEMin = Annotated[str, typer.Option(help=LIMIT_HELP["contact"])]
ConoidElongationMm = Annotated[str, typer.Option(help=LIMIT_HELP["conoid"])]
GirdleRanges = Annotated[str, typer.Option(help=LIMIT_HELP["ranges"])]
Workers = Annotated[Optional[int], typer.Option(help="Processes solving independent starts at once (default: "
                                                     "the CPU count, at most 2); the results do not depend on it.")]


def finish_checked(failed: int, unsolved: str, wrote: str) -> None:
    """With ``failed`` solutions that did not pass their checks: one error line ("``unsolved`` have no solution
    that passes the checks") and exit 1; else the line saying what was written."""
    if failed:
        error(f"{unsolved} have no solution that passes the checks")
        raise typer.Exit(ExitCode.ERROR)
    out_console().print(f"wrote {wrote}")


def sweep_workers(workers: int | None) -> int:
    """``--workers`` -> a worker count (None: sim.analysis.multistart.default_workers)."""
    from sim.analysis.multistart import MAX_WORKERS, default_workers

    if workers is None:
        return default_workers()
    if not 1 <= workers <= MAX_WORKERS:
        raise BadInputError(f"--workers must be in 1..{MAX_WORKERS}, not {workers}")
    return workers


def start_plan(random_starts: int, seed: int):
    """``--random-starts``, ``--seed`` -> a StartPlan (sim.analysis.multistart)."""
    from sim.analysis.multistart import StartPlan

    if not 0 <= random_starts <= 100 or not 0 <= seed < 2 ** 63:
        raise BadInputError("--random-starts must be in 0..100 and --seed in 0..2^63-1")
    return StartPlan(random_starts=random_starts, seed=seed)


def optima_note(optima, plan) -> str:
    """"best of N starts" and, when two starts ended in optima further apart than the plan's tolerance,
    the gap (the point is flagged)."""
    n = len(optima.found) + len(optima.failed)
    note = f"best of {n} start{'s' if n != 1 else ''}: {optima.best_label or 'none passed'}"
    return note + (f"; FLAGGED: the best two optima differ by {100 * optima.gap:.1f} %"
                   if optima.flagged(plan.tolerance) else "")


def parse_limits(contact_e_min: str, conoid_elongation_mm: str, girdle_ranges: str):
    """The three limit options -> PassiveLimits (sim.analysis.passive_limits)."""
    from sim.analysis.passive_limits import AUTHORS_GIRDLE_RANGES_RAD, REST_DEPTH, PassiveLimits

    def number_or(text: str, option: str, words: dict):
        if text in words:
            return words[text]
        try:
            return float(text)
        except ValueError:
            raise BadInputError(f"{option} {text!r}: a number or one of {', '.join(words)}") from None

    if girdle_ranges not in ("authors", "model"):
        raise BadInputError(f"--girdle-ranges {girdle_ranges!r}: 'authors' or 'model'")
    e_min = number_or(contact_e_min, "--contact-e-min", {"rest": REST_DEPTH, "none": None})
    elongation = number_or(conoid_elongation_mm, "--conoid-elongation-mm", {"none": None})
    try:
        return PassiveLimits(e_min, None if elongation is None else elongation * 1e-3,
                             AUTHORS_GIRDLE_RANGES_RAD if girdle_ranges == "authors" else None)
    except ValueError as exc:
        raise BadInputError(str(exc)) from None


RHYTHM_HELP = ("Hold the girdle of a published shoulder rhythm at each posture's plane and elevation, fitted to the "
               "model's thorax and conoid (sim.analysis.rhythm): degroot2001 (de Groot & Brand 2001 with the Delft "
               "rest posture) or degroot2001-das3rest (with the DAS3 rest posture).")


def parse_girdle(text: str) -> tuple[float, ...]:
    """``SCy,SCz,SCx,ACy,ACz,ACx`` in degrees -> six finite angles, deg."""
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        raise BadInputError(f"--girdle {text!r}: six numbers SCy,SCz,SCx,ACy,ACz,ACx in degrees") from None
    if len(values) != 6 or not all(math.isfinite(v) for v in values):
        raise BadInputError(f"--girdle {text!r}: six finite numbers SCy,SCz,SCx,ACy,ACz,ACx in degrees "
                            f"(got {len(values)})")
    check_posture({"girdle_deg": values})
    return values


def posture_of(values: dict):
    """A static-optimisation Posture from a row of degrees (``girdle_deg`` optional)."""
    from sim.analysis.static_opt import Posture

    girdle = values.get("girdle_deg")
    return Posture(math.radians(values["plane_deg"]), math.radians(values["elevation_deg"]),
                   math.radians(values["axial_rotation_deg"]), math.radians(values["elbow_deg"]),
                   math.radians(values["pronation_deg"]),
                   None if girdle is None else tuple(math.radians(v) for v in girdle))


def held_girdle_posture(model, values: dict, rhythm, start=None):
    """The posture of ``values`` with its girdle from ``rhythm`` (fitted to the model) if given; a held girdle
    is checked: the humerus must be placeable and, for a girdle given as such, every muscle path inside the
    path model (else one BadInputError line; for a rhythm's girdle the paths outside are printed). ``start``: the girdle the rhythm's fit starts from (rad)."""
    from sim.analysis.rhythm import RhythmFitError, fit_to_model, short_paths
    from sim.analysis.static_opt import StaticOptError, start_posture

    if rhythm is not None:
        try:
            girdle = fit_to_model(model, rhythm.girdle(math.radians(values["plane_deg"]),
                                                       math.radians(values["elevation_deg"])), start)
        except RhythmFitError as exc:
            raise BadInputError(f"--rhythm {rhythm.name} at elevation {values['elevation_deg']:g} deg: {exc}") from None
        values = {**values, "girdle_deg": tuple(math.degrees(v) for v in girdle)}
    posture = posture_of(values)
    if posture.girdle is None:
        return posture
    label = f"girdle {', '.join(f'{v:.4g}' for v in values['girdle_deg'])} deg"
    try:
        q = start_posture(model, posture, None)
    except StaticOptError as exc:
        raise BadInputError(f"{label}: {exc.args[0]}") from None
    short = short_paths(model, q)
    if short and rhythm is None:
        name, mm = short[0]
        raise BadInputError(f"{label}: muscle path {name} {mm:.1f} mm shorter than its tendon slack plus the "
                            f"shortest valid fibre (outside the path model; {len(short)} muscles)")
    if short:
        out_console().print(f"[yellow]{label}: outside the path model: "
                            f"{', '.join(f'{n} {mm:.1f} mm' for n, mm in short)}[/]")
    return posture
