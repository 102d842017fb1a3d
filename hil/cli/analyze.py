"""``hil analyze``: static optimisation with the GH constraint, maximum isometric moments, a feed-forward schedule
and stimulation-channel optimisation (numerics in :mod:`sim.analysis.static_opt`, :mod:`sim.analysis.max_moment`,
:mod:`sim.analysis.feedforward`, :mod:`sim.analysis.channel_opt`)."""
from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Annotated, Optional

import numpy as np
import typer

from hil.cli.common import BadInputError, ExitCode, error, load_model_options, out_console, user_errors

app = typer.Typer(no_args_is_help=True, help="Optimisation analyses of the DAS3 model.")

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


def parse_angles(text: str) -> np.ndarray:
    """``START:STOP:STEP`` in degrees (STOP included) -> radians."""
    try:
        start, stop, step = (float(v) for v in text.split(":"))
    except ValueError:
        raise BadInputError(f"--angles {text!r}: expected START:STOP:STEP in degrees") from None
    if not (all(math.isfinite(v) for v in (start, stop, step)) and step > 0 and stop >= start):
        raise BadInputError(f"--angles {text!r}: need finite values, STEP > 0 and STOP >= START")
    n = int(math.floor((stop - start) / step + 1e-9)) + 1
    if n > 1000:
        raise BadInputError(f"--angles {text!r}: {n} angles (at most 1000)")
    return np.radians(start + step * np.arange(n))


def read_trajectory(path: Path, defaults: dict) -> list[dict]:
    """Postures from a CSV with ``elevation_deg`` and optional ``plane_deg``, ``axial_rotation_deg``,
    ``elbow_deg``, ``pronation_deg`` columns (missing ones take the command's options)."""
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    if not rows or "elevation_deg" not in rows[0]:
        raise BadInputError(f"--trajectory {path}: a CSV with at least an 'elevation_deg' column and one row")
    postures = []
    for n, row in enumerate(rows, start=2):
        try:
            values = {k: float(row[k]) if row.get(k) not in (None, "") else defaults[k] for k in defaults}
        except ValueError:
            raise BadInputError(f"--trajectory {path}, line {n}: values must be numbers") from None
        if not all(math.isfinite(v) for v in values.values()):
            raise BadInputError(f"--trajectory {path}, line {n}: values must be finite")
        postures.append(values)
    return postures


def _posture(values: dict):
    from sim.analysis.static_opt import Posture

    return Posture(math.radians(values["plane_deg"]), math.radians(values["elevation_deg"]),
                   math.radians(values["axial_rotation_deg"]), math.radians(values["elbow_deg"]),
                   math.radians(values["pronation_deg"]))


def _report_solution(sol, label: str) -> None:
    c = sol.checks
    status = "[green]checks passed[/]" if c.passed else "[red]checks FAILED: " + "; ".join(c.failures) + "[/]"
    out_console().print(
        f"{label}: cost {sol.cost:.6g}, GH stability {sol.gh_stability:+.3f}, {sol.iterations} iterations, "
        f"{sol.time_s:.2f} s; residual |f_eom| {c.eom_max_nm:.2g} N m, |g| {c.contraction_max:.2g}, "
        f"a in [{c.activation_range[0]:.3g}, {c.activation_range[1]:.3g}]; active: "
        f"{', '.join(sol.active[:8]) or 'none'}{' ...' if len(sol.active) > 8 else ''}; {status}")


def static_opt(
    out: Annotated[Path, typer.Option(help="Output directory (created).")],
    elevation: Annotated[Optional[float], typer.Option(help="Thoracohumeral elevation, deg.")] = None,
    plane: Annotated[float, typer.Option(help=PLANE_HELP)] = 45.0,
    axial_rotation: Annotated[float, typer.Option(help="Axial rotation, deg (+ = internal).")] = 0.0,
    elbow: Annotated[float, typer.Option(help="Elbow flexion, deg.")] = 37.64,
    pronation: Annotated[float, typer.Option(help="Forearm pronation, deg.")] = 81.44,
    criterion: Annotated[str, typer.Option(help=CRITERION_HELP)] = "b",
    load: Annotated[list[str], typer.Option(help="A load NAME=VALUE (repeatable; names as in "
                                                 "'hil model info').")] = [],
    gh_limit: Annotated[float, typer.Option(help="GH stability limit (0 = the glenoid rim; < 0 a margin).")] = 0.0,
    no_gh: Annotated[bool, typer.Option("--no-gh", help="Drop the GH stability constraint.")] = False,
    trajectory: Annotated[Optional[Path], typer.Option(help="CSV of postures (elevation_deg[, plane_deg, ...]) "
                                                           "solved in order with warm starts.")] = None,
    max_iterations: Annotated[int, typer.Option(help="SLSQP iterations per run (it restarts twice).")] = 500,
    model_config: Annotated[Optional[Path], typer.Option(help="Model options TOML.")] = None,
) -> None:
    """Muscle activations that hold a posture at minimum criterion with the GH joint stable; exits 1
    when no solution passes the checks (residual, constraints, bounds) re-evaluated with the plant."""
    from hil.reports import analysis_output as ao
    from sim.analysis.static_opt import CRITERIA, SolverSettings, StaticOptError, solve_static
    from sim.das3.model import load_model

    with user_errors():
        if criterion not in CRITERIA:
            raise BadInputError(f"--criterion must be one of {', '.join(CRITERIA)}")
        if not 1 <= max_iterations <= 100000:
            raise BadInputError("--max-iterations must be in 1..100000")
        if (elevation is None) == (trajectory is None):
            raise BadInputError("give exactly one of --elevation and --trajectory")
        loads = parse_loads(load)
        defaults = {"plane_deg": plane, "elevation_deg": elevation, "axial_rotation_deg": axial_rotation,
                    "elbow_deg": elbow, "pronation_deg": pronation}
        postures = [defaults] if trajectory is None else read_trajectory(trajectory, defaults)
        model = load_model(load_model_options(model_config))
        out.mkdir(parents=True, exist_ok=True)
        results, q_start, unsolved = [], None, 0
        for values in postures:
            label = f"elevation {values['elevation_deg']:g} deg, plane {values['plane_deg']:g} deg"
            try:
                sol = solve_static(model, _posture(values), loads, criterion, None if no_gh else gh_limit, q_start,
                                   SolverSettings(max_iterations=max_iterations))
                q_start = sol.x[:11]
            except StaticOptError as exc:
                sol = exc.solution
                if sol is None:          # no point to report (the posture could not be set up)
                    error(f"{label}: {exc}")
                    unsolved += 1
                    continue
            results.append(sol)
            _report_solution(sol, label)
        if results and trajectory is None:
            ao.write_solution(out, results[0], model)
        elif results:
            ao.write_trajectory(out, results, model)
        failed = unsolved + sum(not s.checks.passed for s in results)
        if failed:
            error(f"{failed} of {len(postures)} postures have no solution that passes the checks")
            raise typer.Exit(ExitCode.ERROR)
        out_console().print(f"wrote {out}")


def max_moment(
    task: Annotated[str, typer.Option(help="shoulder-flexion, shoulder-extension, abduction, adduction, "
                                           "internal-rotation, external-rotation, elbow-flexion, "
                                           "elbow-extension, pronation or supination.")],
    out: Annotated[Path, typer.Option(help="Output directory (created).")],
    angles: Annotated[Optional[str], typer.Option(help="START:STOP:STEP of the swept angle, deg "
                                                       "(default: the task's).")] = None,
    gh_limit: Annotated[float, typer.Option(help="GH stability limit.")] = 0.0,
    model_config: Annotated[Optional[Path], typer.Option(help="Model options TOML.")] = None,
) -> None:
    """Maximum isometric moment of a task over its angle range (Chadwick 2014 §II-F, Figs. 4-8): CSV and
    figure; exits 1 if any angle has no solution that passes the checks."""
    from hil.reports import analysis_output as ao
    from sim.analysis.max_moment import TASKS, sweep
    from sim.analysis.static_opt import StaticOptError
    from sim.das3.model import load_model

    with user_errors():
        if task not in TASKS:
            raise BadInputError(f"--task must be one of {', '.join(TASKS)}")
        spec = TASKS[task]
        angles_rad = parse_angles(angles or ":".join(f"{v:g}" for v in spec.default_angles_deg))
        model = load_model(load_model_options(model_config))
        out.mkdir(parents=True, exist_ok=True)
        results = sweep(model, spec, angles_rad, gh_limit)
        for angle, r in zip(angles_rad, results):
            sol = r.solution              # a MaxMomentPoint or the StaticOptError of a failed angle
            if sol is None:
                error(f"{task} at {math.degrees(angle):g} deg: {r}")
            else:
                _report_solution(sol, f"{task} at {math.degrees(angle):g} deg: moment {sol.cost:.2f} N m")
        path = ao.write_max_moment(out, task, spec, angles_rad, results, model)
        failed = sum(isinstance(r, StaticOptError) for r in results)
        if failed:
            error(f"{failed} of {len(results)} angles have no solution that passes the checks")
            raise typer.Exit(ExitCode.ERROR)
        out_console().print(f"wrote {path}")


app.command("static-opt")(static_opt)
app.command("max-moment")(max_moment)


def feedforward(
    out: Annotated[Path, typer.Option(help="Output directory (created): feedforward.csv (direct excitation "
                                          "schedule for the loopback playback), initial_state.json, "
                                          "trajectory.csv and trajectory.png.")],
    start: Annotated[float, typer.Option(help="Start elevation, deg.")] = 10.0,
    stop: Annotated[float, typer.Option(help="End elevation, deg.")] = 80.0,
    move: Annotated[float, typer.Option(help="Movement time, s (minimum jerk).")] = 1.3,
    hold: Annotated[float, typer.Option(help="Hold before and after the movement, s.")] = 0.3,
    knot_ms: Annotated[float, typer.Option(help="Schedule row spacing, ms (the playback's command period).")] = 20.0,
    plane: Annotated[float, typer.Option(help=PLANE_HELP)] = 90.0,
    axial_rotation: Annotated[float, typer.Option(help="Axial rotation, deg (+ = internal); the default keeps the "
                                                        "resting posture's plane + axial rotation of about 60 deg.")
                              ] = -30.0,
    elbow: Annotated[float, typer.Option(help="Elbow flexion, deg.")] = 37.64,
    pronation: Annotated[float, typer.Option(help="Forearm pronation, deg.")] = 81.44,
    criterion: Annotated[str, typer.Option(help=CRITERION_HELP)] = "b",
    gh_limit: Annotated[float, typer.Option(help="GH stability limit at every knot (< 0: a margin).")] = 0.0,
    model_config: Annotated[Optional[Path], typer.Option(help="Model options TOML.")] = None,
) -> None:
    """A feed-forward excitation schedule for an elevation movement from static optimisation at every
    knot (minimum-jerk posture path; excitations that reproduce the activations through the activation
    dynamics); exits 1 if a knot has no checked solution."""
    from hil.reports import analysis_output as ao
    from sim.analysis.feedforward import elevation_schedule
    from sim.analysis.static_opt import CRITERIA, Posture, StaticOptError
    from sim.das3.model import load_model

    with user_errors():
        if criterion not in CRITERIA:
            raise BadInputError(f"--criterion must be one of {', '.join(CRITERIA)}")
        if not (math.isfinite(gh_limit) and gh_limit <= 0):
            raise BadInputError("--gh-limit must be a finite number <= 0")
        for name, value in (("--move", move), ("--knot-ms", knot_ms)):
            if not (math.isfinite(value) and value > 0):
                raise BadInputError(f"{name} must be a finite number > 0")
        if not (math.isfinite(hold) and hold >= 0):
            raise BadInputError("--hold must be a finite number >= 0")
        model = load_model(load_model_options(model_config))
        base = Posture(math.radians(plane), 0.0, math.radians(axial_rotation), math.radians(elbow),
                       math.radians(pronation))
        out.mkdir(parents=True, exist_ok=True)
        try:
            ff = elevation_schedule(model, base, math.radians(start), math.radians(stop), move, hold,
                                    knot_ms * 1e-3, criterion, gh_limit=gh_limit)
        except StaticOptError as exc:
            error(f"a knot has no checked solution: {exc}")
            raise typer.Exit(ExitCode.ERROR) from None
        ao.write_feedforward(out, ff, model)
        worst = max(s.gh_stability for s in ff.solutions)
        total = sum(s.time_s for s in ff.solutions)
        out_console().print(f"{len(ff.times)} rows, {len({id(s) for s in ff.solutions})} postures solved in "
                            f"{total:.1f} s; largest GH stability {worst:+.3f}; wrote {out}")


app.command("feedforward")(feedforward)


def channels(
    config: Annotated[Path, typer.Option(help="Service config whose [[stimulation.channel]] map is used.")],
    out: Annotated[Path, typer.Option(help="Output directory (created): channels.json, channels.csv.")],
    elevation: Annotated[float, typer.Option(help="Thoracohumeral elevation, deg.")],
    plane: Annotated[float, typer.Option(help=PLANE_HELP)] = 45.0,
    axial_rotation: Annotated[float, typer.Option(help="Axial rotation, deg.")] = 0.0,
    elbow: Annotated[float, typer.Option(help="Elbow flexion, deg.")] = 90.0,
    pronation: Annotated[float, typer.Option(help="Forearm pronation, deg.")] = 81.44,
    load: Annotated[list[str], typer.Option(help="A load NAME=VALUE (repeatable).")] = [],
    gh_limit: Annotated[float, typer.Option(help="GH stability limit.")] = 0.0,
    pulse_width_us: Annotated[float, typer.Option(help="Pulse width of the commands reported, us.")] = 300.0,
    frequency_hz: Annotated[float, typer.Option(help="Frequency of the commands reported, Hz.")] = 40.0,
    starts: Annotated[int, typer.Option(help="Starts of the local search for the smallest violation.")] = 4,
) -> None:
    """Channel levels of a stimulation map that make the arm rest at a posture with the GH joint stable
    (the girdle finds its own equilibrium); exits 1 with the closest reachable posture when none is found."""
    import json

    from hil.config import load_service_config
    from hil.rt.stimulation import StimulationModel, amplitude_for_level, load_stimulation_config
    from sim.analysis.channel_opt import solve_channels
    from sim.analysis.static_opt import Posture
    from sim.das3.model import load_model

    with user_errors():
        for name, value in (("--pulse-width-us", pulse_width_us), ("--frequency-hz", frequency_hz)):
            if not (math.isfinite(value) and value > 0):
                raise BadInputError(f"{name} must be a finite number > 0")
        if not 1 <= starts <= 50:
            raise BadInputError("--starts must be in 1..50")
        service = load_service_config(config)
        model = load_model(service.model)
        stim = load_stimulation_config(service.stimulation, model.muscle_names, str(config))
        if stim.mode != "channels":
            raise BadInputError(f"{config}: [stimulation] mode must be 'channels' for a channel optimisation")
        gains = StimulationModel(stim, model.muscle_names).gains
        posture = Posture(*(math.radians(v) for v in (plane, elevation, axial_rotation, elbow, pronation)))
        res = solve_channels(model, posture, gains, parse_loads(load), gh_limit, starts=starts)
        out.mkdir(parents=True, exist_ok=True)
        rows = []
        for ch, level in zip(stim.channels, np.where(res.levels < 1e-6, 0.0, res.levels)):
            amp = amplitude_for_level(ch, float(level), pulse_width_us * 1e-6, frequency_hz)
            rows.append({"channel": ch.name, "level": float(level), "pulse_width_us": pulse_width_us,
                         "frequency_hz": frequency_hz, "amplitude_mA": None if amp is None else amp * 1e3})
        doc = {"feasible": res.feasible, "message": res.message, "posture_error_deg": res.posture_error_deg,
               "reached_deg": res.reached_deg, "gh_stability": res.gh_stability, "channels": rows,
               "checks_failures": res.checks.failures, "solve_time_s": res.time_s,
               "joint_angles_deg": dict(zip(model.dof_names, np.degrees(res.x[:11]).round(4).tolist()))}
        (out / "channels.json").write_text(json.dumps(doc, indent=2) + "\n")
        with open(out / "channels.csv", "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        for r in rows:
            amp = "unreachable at this frequency" if r["amplitude_mA"] is None else f"{r['amplitude_mA']:.1f} mA"
            out_console().print(f"{r['channel']:>20}: level {r['level']:.3f}  ({amp})")
        if not res.feasible:
            error(res.message)
            raise typer.Exit(ExitCode.ERROR)
        out_console().print(f"{res.message}; {res.time_s:.1f} s; wrote {out}")


app.command("channels")(channels)
