"""``hil analyze``: static optimisation with the GH constraint, the design criteria, a feed-forward schedule and
stimulation-channel optimisation here (numerics in :mod:`sim.analysis.static_opt`, :mod:`sim.analysis.criteria`,
:mod:`sim.analysis.feedforward`, :mod:`sim.analysis.channel_opt`); maximum isometric moments in :mod:`.max_moment`,
a patient's elbow tests (catch test, passive range) in :mod:`.patient`, the shared options in :mod:`.options`."""
from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Annotated, Optional

import numpy as np
import typer

from hil.cli.analyze.max_moment import max_moment
from hil.cli.analyze.options import (
    CRITERION_HELP,
    PLANE_HELP,
    POSTURE_RANGES_DEG,
    RHYTHM_HELP,
    ConoidElongationMm,
    ContactEMin,
    GirdleRanges,
    RandomStarts,
    Seed,
    check_posture,
    finish_checked,
    held_girdle_posture,
    optima_note,
    parse_angles,
    parse_girdle,
    parse_limits,
    parse_loads,
    read_trajectory,
    report_solution,
    start_plan,
)
from hil.cli.analyze.patient import catch, passive_range
from hil.cli.common import BadInputError, ExitCode, error, load_model_options, out_console, user_errors
from sim.output_file import output_file, write_output_text

app = typer.Typer(no_args_is_help=True, help="Optimisation analyses of the DAS3 model.")

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
                                                           "solved in order with warm starts; may carry the "
                                                           "six girdle columns SCy_deg..ACx_deg.")] = None,
    max_iterations: Annotated[int, typer.Option(help="SLSQP iterations per run (it restarts twice).")] = 500,
    girdle: Annotated[Optional[str], typer.Option(help="Hold the girdle: SCy,SCz,SCx,ACy,ACz,ACx, deg (only the "
                                                       "GH angles are solved from the thoracohumeral target).")] = None,
    rhythm: Annotated[Optional[str], typer.Option(help=RHYTHM_HELP)] = None,
    random_starts: RandomStarts = 2,
    seed: Seed = 0,
    contact_e_min: ContactEMin = "none",
    conoid_elongation_mm: ConoidElongationMm = "none",
    girdle_ranges: GirdleRanges = "authors",
    model_config: Annotated[Optional[Path], typer.Option(help="Model options TOML.")] = None,
) -> None:
    """Muscle activations that hold a posture at minimum criterion with the GH joint stable, from several
    starts (a trajectory also from the neighbouring postures, forwards and back); exits 1 when no solution
    passes the checks (residual, constraints, bounds) re-evaluated with the plant."""
    from hil.reports import analysis_output as ao
    from sim.analysis.multistart import solve_trajectory
    from sim.analysis.rhythm import RHYTHMS, load_rhythm
    from sim.analysis.static_opt import CRITERIA, SolverSettings, StaticOptError
    from sim.das3.model import load_model

    with user_errors():
        if criterion not in CRITERIA:
            raise BadInputError(f"--criterion must be one of {', '.join(CRITERIA)}")
        if not 1 <= max_iterations <= 100000:
            raise BadInputError("--max-iterations must be in 1..100000")
        if (elevation is None) == (trajectory is None):
            raise BadInputError("give exactly one of --elevation and --trajectory")
        if girdle is not None and rhythm is not None:
            raise BadInputError("give at most one of --girdle and --rhythm")
        if rhythm is not None and rhythm not in RHYTHMS:
            raise BadInputError(f"--rhythm must be one of {', '.join(RHYTHMS)}")
        loads = parse_loads(load)
        defaults = {"plane_deg": plane, "elevation_deg": elevation, "axial_rotation_deg": axial_rotation,
                    "elbow_deg": elbow, "pronation_deg": pronation}
        check_posture(defaults)
        postures = [defaults] if trajectory is None else read_trajectory(trajectory, defaults)
        if (girdle is not None or rhythm is not None) and any(v.get("girdle_deg") for v in postures):
            raise BadInputError(f"--trajectory {trajectory} has girdle columns: give no --girdle or --rhythm")
        if girdle is not None:
            held_girdle = parse_girdle(girdle)
            postures = [{**v, "girdle_deg": held_girdle} for v in postures]
        model = load_model(load_model_options(model_config))
        shape = None if rhythm is None else load_rhythm(rhythm, model)
        held = [held_girdle_posture(model, v, shape) for v in postures]
        out.mkdir(parents=True, exist_ok=True)
        plan = start_plan(random_starts, seed)
        limits = parse_limits(contact_e_min, conoid_elongation_mm, girdle_ranges)
        solved = solve_trajectory(model, held, loads, criterion, None if no_gh else gh_limit, plan,
                                  SolverSettings(max_iterations=max_iterations), limits)
        results, unsolved = [], 0
        for values, (sol, optima) in zip(postures, solved):
            label = f"elevation {values['elevation_deg']:g} deg, plane {values['plane_deg']:g} deg"
            if isinstance(sol, StaticOptError):
                if sol.solution is None:     # no point to report (the posture could not be set up)
                    error(f"{label}: {sol}")
                    unsolved += 1
                    continue
                sol = sol.solution
            results.append(sol)
            report_solution(sol, f"{label} ({optima_note(optima, plan)})")
        if results and trajectory is None:
            ao.write_solution(out, results[0], model)
        elif results:
            ao.write_trajectory(out, results, model)
        failed = unsolved + sum(not s.checks.passed for s in results)
        finish_checked(failed, f"{failed} of {len(postures)} postures", str(out))


MAX_FEEDFORWARD_KNOTS = 2000
"""The most knots of a feed-forward schedule (*proposal*: about an hour of static optimisations on this machine
type; the default movement has 65)."""

app.command("static-opt")(static_opt)
app.command("max-moment")(max_moment)


def _play_feedforward(model, ff, out: Path, seconds: float, step_ms: float, figure: Path) -> None:
    """--play: the schedule played open loop (``played.csv``) and its figure in the form of Chadwick Fig. 3;
    exits 1 if the plant diverges."""
    from hil.reports.flexion_figure import plot_playback, write_playback
    from sim.analysis.feedforward import play
    from sim.plants import PlantDivergedError

    try:
        pb = play(model, ff.times, ff.excitation, ff.initial_state, seconds, step_ms * 1e-3)
    except PlantDivergedError as exc:
        error(f"the plant cannot play the schedule: {exc}")
        raise typer.Exit(ExitCode.ERROR) from None
    write_playback(out / "played.csv", pb, model)
    plot_playback(figure, pb, model,
                  f"Feed-forward elevation played open loop, {step_ms:g} ms steps (cf. Chadwick 2014 Fig. 3)")
    plane, elevation = np.degrees(pb.th_angles[:, 0]), np.degrees(pb.th_angles[:, 1])
    out_console().print(f"played {seconds:g} s: elevation {elevation[0]:.1f} -> {elevation[-1]:.1f} deg (peak "
                        f"{elevation.max():.1f}), plane {plane.min():.1f}-{plane.max():.1f} deg, largest GH "
                        f"stability {pb.gh_stability.max():+.3f}; wrote {figure}")


def feedforward(
    out: Annotated[Path, typer.Option(help="Output directory (created): feedforward.csv (direct excitation "
                                          "schedule for the loopback playback), initial_state.json, "
                                          "trajectory.csv and trajectory.png.")],
    start: Annotated[float, typer.Option(help="Start elevation, deg (Chadwick 2014 Fig. 3: 10).")] = 10.0,
    stop: Annotated[float, typer.Option(help="End elevation, deg (Chadwick 2014 Fig. 3: 80).")] = 80.0,
    move: Annotated[float, typer.Option(help="Movement time, s (minimum jerk; Chadwick 2014 Fig. 3: 1.3).")] = 1.3,
    hold: Annotated[float, typer.Option(help="Hold before and after the movement, s.")] = 0.0,
    knot_ms: Annotated[float, typer.Option(help="Schedule row spacing, ms (the playback's command period; at most 2000 rows in all).")] = 20.0,
    plane: Annotated[float, typer.Option(help=PLANE_HELP + " Chadwick 2014 Fig. 3: about 50.")] = 50.0,
    axial_rotation: Annotated[Optional[float], typer.Option(
        help="Axial rotation, deg (+ = internal); default 60 - plane, the resting posture's plane + axial rotation."
    )] = None,
    elbow: Annotated[float, typer.Option(help="Elbow flexion, deg.")] = 37.64,
    pronation: Annotated[float, typer.Option(help="Forearm pronation, deg.")] = 81.44,
    criterion: Annotated[str, typer.Option(help=CRITERION_HELP)] = "b",
    gh_limit: Annotated[float, typer.Option(help="GH stability limit at every knot (< 0: a margin).")] = 0.0,
    model_config: Annotated[Optional[Path], typer.Option(help="Model options TOML.")] = None,
    play: Annotated[float, typer.Option(help="Then play the schedule open loop in the plant for this long, s, and "
                                             "write played.csv and the Chadwick Fig. 3 form figure (0: do not).")
                    ] = 0.0,
    step_ms: Annotated[float, typer.Option(help="Plant step of --play, ms (Chadwick 2014: 4).")] = 4.0,
    figure: Annotated[Optional[Path], typer.Option(help="Figure of --play (default: OUT/played.png).")] = None,
) -> None:
    """A feed-forward excitation schedule for an elevation movement from static optimisation at every
    knot (minimum-jerk posture path; excitations that reproduce the activations through the activation
    dynamics); exits 1 if a knot has no checked solution. The defaults are Chadwick et al. 2014 Fig. 3's
    movement; --play shows what the plant does with it."""
    from hil.reports import analysis_output as ao
    from sim.analysis.feedforward import REST_LONG_AXIS_RAD, elevation_schedule
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
        knots = (move + 2 * hold) / (knot_ms * 1e-3)
        if not knots <= MAX_FEEDFORWARD_KNOTS:
            raise BadInputError(f"--move {move:g} s and --hold {hold:g} s at --knot-ms {knot_ms:g} are {knots:.3g} knots, "
                                f"each a static optimisation; at most {MAX_FEEDFORWARD_KNOTS}")
        if not (math.isfinite(play) and 0 <= play <= 60):
            raise BadInputError("--play must be a number of seconds in [0, 60]")
        if not (math.isfinite(step_ms) and 0.1 <= step_ms <= 20):
            raise BadInputError("--step-ms must be a number in [0.1, 20]")
        if figure is not None and play == 0:
            raise BadInputError("--figure needs --play")
        check_posture({"plane_deg": plane, "axial_rotation_deg": axial_rotation, "elbow_deg": elbow,
                       "pronation_deg": pronation})
        _, lowest, highest = POSTURE_RANGES_DEG["elevation_deg"]
        for option, value in (("--start", start), ("--stop", stop)):
            if math.isfinite(value) and not lowest <= value <= highest:
                raise BadInputError(f"{option} {value:g} deg must lie within {lowest:g} and {highest:g} deg (an "
                                    "elevation)")
        model = load_model(load_model_options(model_config))
        axial = REST_LONG_AXIS_RAD - math.radians(plane) if axial_rotation is None else math.radians(axial_rotation)
        base = Posture(math.radians(plane), 0.0, axial, math.radians(elbow), math.radians(pronation))
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
        if play > 0:
            _play_feedforward(model, ff, out, play, step_ms, figure or out / "played.png")


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
        check_posture({"plane_deg": plane, "elevation_deg": elevation, "axial_rotation_deg": axial_rotation,
                       "elbow_deg": elbow, "pronation_deg": pronation})
        service = load_service_config(config)
        model = load_model(service.model)
        stim = load_stimulation_config(service.stimulation, model.muscle_names, str(config))
        if stim.mode != "channels":
            raise BadInputError(f"{config}: [stimulation] mode must be 'channels' for a channel optimisation")
        stim_model = StimulationModel(stim, model.muscle_names)
        posture = Posture(*(math.radians(v) for v in (plane, elevation, axial_rotation, elbow, pronation)))
        res = solve_channels(model, posture, stim_model.gains, parse_loads(load), gh_limit, starts=starts,
                             spill=(stim_model.spill_gains, stim_model.spill_onset))
        out.mkdir(parents=True, exist_ok=True)
        rows = []   # amplitudes at this session's thresholds
        for ch, level in zip(stim_model.channels, np.where(res.levels < 1e-6, 0.0, res.levels)):
            amp = amplitude_for_level(ch, float(level), pulse_width_us * 1e-6, frequency_hz)
            rows.append({"channel": ch.name, "level": float(level), "pulse_width_us": pulse_width_us,
                         "frequency_hz": frequency_hz, "amplitude_mA": None if amp is None else amp * 1e3})
        doc = {"feasible": res.feasible, "message": res.message, "posture_error_deg": res.posture_error_deg,
               "reached_deg": res.reached_deg, "gh_stability": res.gh_stability, "channels": rows,
               "checks_failures": res.checks.failures, "solve_time_s": res.time_s,
               "joint_angles_deg": dict(zip(model.dof_names, np.degrees(res.x[:11]).round(4).tolist()))}
        write_output_text(out / "channels.json", json.dumps(doc, indent=2) + "\n")
        with output_file(out / "channels.csv", "w", newline="") as fh:
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


def criteria(
    out: Annotated[Path, typer.Option(help="Output directory (created): criteria.csv and criteria.png.")],
    rhythm: Annotated[str, typer.Option(help=RHYTHM_HELP)] = "degroot2001-das3rest",
    plane: Annotated[float, typer.Option(help=PLANE_HELP)] = 0.0,
    elevations: Annotated[str, typer.Option(help="START:STOP:STEP of the thoracohumeral elevation, deg (0 and 180 "
                                                 "are singular: no plane of elevation).")] = "10:50:10",
    model_config: Annotated[Optional[Path], typer.Option(help="Model options TOML.")] = None,
) -> None:
    """van der Helm (1994) Fig. 8 under his conditions: the four criteria over elevation with the girdle held
    from a shoulder rhythm, force as % of maximal force for the groups of his 12 EMG muscles, and criterion
    (b) with and without the GH constraint (rotator-cuff force); exits 1 if a point fails the checks."""
    from hil.reports.criteria_figure import write_criteria
    from sim.analysis.criteria import gh_effect, sweep
    from sim.analysis.rhythm import RHYTHMS, load_rhythm, scapula_deviation
    from sim.das3.model import load_model

    with user_errors():
        if rhythm not in RHYTHMS:
            raise BadInputError(f"--rhythm must be one of {', '.join(RHYTHMS)}")
        if not (math.isfinite(plane) and -90 <= plane <= 180):
            raise BadInputError("--plane must be a finite angle in [-90, 180] deg")
        elevation_rad = parse_angles(elevations, "--elevations")
        if elevation_rad.min() <= 0 or elevation_rad.max() >= math.pi:
            raise BadInputError(f"--elevations {elevations!r}: every elevation must lie strictly between 0 and 180")
        model = load_model(load_model_options(model_config))
        shape = load_rhythm(rhythm, model)
        base = {"plane_deg": plane, "axial_rotation_deg": 0.0, "elbow_deg": 37.64, "pronation_deg": 81.44}
        postures, deviations = [], []
        for e in elevation_rad:
            postures.append(held_girdle_posture(model, {**base, "elevation_deg": math.degrees(e)}, shape,
                                                postures[-1].girdle if postures else None))
            deviations.append(scapula_deviation(shape.girdle(math.radians(plane), e), postures[-1].girdle))
            out_console().print(f"elevation {math.degrees(e):g} deg: girdle held "
                                f"{np.degrees(postures[-1].girdle).round(2).tolist()} deg, scapula "
                                f"{math.degrees(deviations[-1]):.1f} deg from the rhythm's")
        out.mkdir(parents=True, exist_ok=True)
        points = []
        for posture, deviation in zip(postures, deviations):
            here = sweep(model, [posture], from_rhythm=[deviation])
            points += here
            for p in here:
                label = f"elevation {math.degrees(p.elevation):g} deg, ({p.criterion}) " + (
                    "without GH" if p.gh_limit is None else "with GH")
                if p.solution is None:
                    error(f"{label}: {p.error}")
                else:
                    report_solution(p.solution, label)
        active = [f"{math.degrees(r['elevation']):g}" for r in gh_effect(model, points) if r["active"]]
        out_console().print(f"GH constraint active (criterion b) at elevations: {', '.join(active) or 'none'} deg")
        csv_path, png_path = write_criteria(out, points, model, f"{rhythm}, plane {plane:g} deg (cf. van der Helm "
                                                                 "1994 Fig. 8)")
        failed = sum(not p.passed for p in points)
        finish_checked(failed, f"{failed} of {len(points)} points", f"{csv_path} and {png_path}")


app.command("criteria")(criteria)
app.command("catch")(catch)
app.command("passive-range")(passive_range)
