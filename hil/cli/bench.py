"""``hil bench``: parse the options, call :mod:`hil.bench` and print what it measured."""
from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from hil.cli import bench_gym, bench_tables
from hil.cli.common import (
    SCHEME_HELP,
    BadInputError,
    ExitCode,
    check_duration,
    check_port,
    count,
    err_console,
    error,
    load_model_options,
    out_console,
    positive,
    print_json,
    user_errors,
    warn,
)

app = typer.Typer(no_args_is_help=True, help="Measure the plant's speed.")
PATIENT_HELP = "A virtual patient (preset name or patient file) replacing the config's [patient] table."


MAX_TIMED_STEPS = 10_000_000
"""Most timed steps per step size (the timings are kept: 80 MB; an MTG step takes a few µs, a DAS3 one about 50)."""


def _step_options(step: Optional[float], steps: int, excitation: float) -> tuple:
    """The step sizes to time (--step, or the default pair), after checking --steps and --excitation."""
    from hil.bench.plant import STEP_SIZES_DEFAULT
    count("--steps", steps, 1, MAX_TIMED_STEPS)
    if not (math.isfinite(excitation) and 0.0 <= excitation <= 1.0):
        raise BadInputError(f"--excitation must be in [0, 1], not {excitation!r}")
    return STEP_SIZES_DEFAULT if step is None else (positive("--step", step),)


@app.command("mtg")
def bench_mtg(
    step: Annotated[Optional[float], typer.Option(help="Step size h, s (default: 0.004 and 0.001).")] = None,
    steps: Annotated[int, typer.Option(help="Timed steps per step size (1 to 10^7).")] = 20000,
    excitation: Annotated[float, typer.Option(help="Constant excitation of every MTG.")] = 0.05,
    parameters: Annotated[Optional[Path], typer.Option(help="MTG parameter file (default: the shipped one).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Time the reduced MTG arm's steps from its resting state under a constant excitation: per Python call and
    inside one compiled call (as the tick steps it)."""
    from hil.bench.loop import loop_cpu
    from hil.bench.mtg import mtg_bench

    with user_errors():
        step_sizes = _step_options(step, steps, excitation)
        doc = mtg_bench(step_sizes, steps, excitation, cpu=loop_cpu(), parameters=parameters)
    if json_out:
        print_json(doc)
        return
    table = Table(title=f"MTG arm step time ({doc['n_mtg']} MTGs, {steps} steps from rest, excitation {excitation:g})")
    for col in ("step (ms)", "median per call (µs)", "p99 (µs)", "max (µs)", "in one compiled call (µs)",
                "real-time factor", "steal (ms)"):
        table.add_column(col, justify="right")
    for r in doc["results"]:
        table.add_row(f"{r['step_s'] * 1e3:g}", f"{r['median_step_us']:.2f}", f"{r['p99_step_us']:.2f}",
                      f"{r['max_step_us']:.1f}", f"{r['in_kernel_step_us']:.2f}", f"{r['realtime_factor']:.0f}",
                      str(r["steal_ms"]))
    out_console().print(table)
    out_console().print(f"CPU: {doc['cpu']} ({doc['cpu_count']} logical, pinned to {doc['pinned_cpu']}), "
                        f"Python {doc['python']}, numpy {doc['numpy']}, numba {doc['numba']}")


@app.command("plant")
def bench_plant(
    step: Annotated[Optional[float], typer.Option(
        help="Step size h, s (default: 0.004 and 0.001).")] = None,
    steps: Annotated[int, typer.Option(help="Timed steps per step size (1 to 10^7).")] = 5000,
    excitation: Annotated[float, typer.Option(
        help="Constant excitation of every muscle during the run (with --change-ms: the mean).")] = 0.05,
    change_ms: Annotated[Optional[float], typer.Option(
        help="Draw every muscle's excitation anew (uniform in [0, 2x --excitation]) every this many ms, as a "
             "controller's commands change it (default: constant).")] = None,
    scheme: Annotated[str, typer.Option(help=SCHEME_HELP)] = "activation",
    model_config: Annotated[Optional[Path], typer.Option(
        help="Model options TOML (e.g. configs/model-thelen2003.toml); default: the published model.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Time plant steps from the published equilibrium under a constant excitation or one that changes at a
    controller's rate (--change-ms)."""
    from hil.bench.loop import loop_cpu
    from hil.bench.plant import plant_bench

    with user_errors():
        step_sizes = _step_options(step, steps, excitation)
        change_s = None if change_ms is None else positive("--change-ms", change_ms) / 1e3
        doc = plant_bench(step_sizes, steps, excitation, scheme, cpu=loop_cpu(),
                          model_config=load_model_options(model_config), change_s=change_s)
    results = doc["results"]
    if json_out:
        if step is not None:
            doc.update({k: results[0][k] for k in ("step_s", "median_step_us", "p99_step_us", "realtime_factor")})
        print_json(doc)
        return

    console = out_console()
    drive = f"excitation {excitation:g}" if change_ms is None else \
        f"excitations drawn every {change_ms:g} ms, mean {excitation:g}"
    table = Table(title=f"Plant step time ({doc['muscle_model']} muscles, {steps} steps from the published "
                        f"equilibrium, {drive}, GC off)")
    table.add_column("step (ms)", justify="right")
    table.add_column("median (µs)", justify="right")
    table.add_column("p99 (µs)", justify="right")
    table.add_column("max (µs)", justify="right")
    table.add_column("real-time factor", justify="right")
    for r in results:
        table.add_row(f"{r['step_s'] * 1e3:g}", f"{r['median_step_us']:.1f}", f"{r['p99_step_us']:.1f}",
                      f"{r['max_step_us']:.1f}", f"{r['realtime_factor']:.1f}")
    console.print(table)
    for r in results:
        phases = ", ".join(f"{name} {us:.1f}" for name, us in r["phases_us"].items())
        console.print(f"h = {r['step_s'] * 1e3:g} ms, median per phase (µs): {phases}; "
                      f"steal on CPU {doc['pinned_cpu']} while timing: {r['steal_ms']} ms")
    console.print(f"CPU: {doc['cpu']} ({doc['cpu_count']} logical), Python {doc['python']}, "
                  f"numpy {doc['numpy']}, numba {doc['numba']}")


@app.command("offline")
def bench_offline(
    config: Annotated[Optional[Path], typer.Option(
        help="Service config with in-process controllers (default: configs/elbow-hold.toml).")] = None,
    duration: Annotated[float, typer.Option(help="Simulated s per run.")] = 20.0,
    runs: Annotated[int, typer.Option(help="Runs back to back, each timed on its own (1 to 1000).")] = 7,
    record: Annotated[bool, typer.Option(help="Record each run, as hil run --offline does (to a temporary "
                                              "file).")] = True,
    patient: Annotated[Optional[str], typer.Option(help=PATIENT_HELP)] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Time offline runs (hil run --offline) of a config on one CPU: each run's real-time factor, the median and
    the best, and the steal (goal for the DAS3 elbow hold at 4 ms: >= 100x)."""
    from hil.bench.loop import loop_cpu
    from hil.bench.offline import DEFAULT_CONFIG, offline_bench
    from hil.patients import patient_override

    with user_errors():
        check_duration(duration)
        count("--runs", runs, 1, 1000)
        doc = offline_bench(config or DEFAULT_CONFIG, duration, runs, record, cpu=loop_cpu(),
                            patient=patient_override(patient))
    if json_out:
        print_json(doc)
        return
    console = out_console()
    factors = " / ".join(f"{f:.1f}" for f in doc["realtime_factors"])
    console.print(f"hil bench offline: {runs} runs of {doc['simulated_s']:g} s of {Path(doc['config']).name} at "
                  f"{doc['period_s'] * 1e3:g} ms, patient {doc['patient']}, {'recording' if record else 'not recording'}, "
                  "pinned to CPU "
                  f"{doc['pinned_cpu']}")
    console.print(f"real-time factor: {factors}x; median {doc['median_factor']:.1f}x, best {doc['best_factor']:.1f}x")
    if config is None and patient is None:
        verdict = "met" if doc["median_factor"] >= doc["goal_factor"] else "missed"
        console.print(f"goal (median): >= {doc['goal_factor']:g}x, {verdict}")
    console.print(f"steal on CPU {doc['pinned_cpu']} over the runs: {doc['steal_ms']} ms")
    console.print(f"CPU: {doc['cpu']} ({doc['cpu_count']} logical), Python {doc['python']}, "
                  f"numpy {doc['numpy']}, numba {doc['numba']}")


@app.command("loop")
def bench_loop(
    period: Annotated[float, typer.Option(help="Loop period, s (1-10 ms).")] = 0.001,
    duration: Annotated[float, typer.Option(help="Measured run length, s.")] = 30.0,
    scrape_interval: Annotated[float, typer.Option(help="Scrape /metrics every this many s (0: never).")] = 0.1,
    spin_us: Annotated[float, typer.Option(help="[loop] spin_us: spin this long before each deadline "
                                                "(>= the period: never sleep).")] = 200.0,
    baseline: Annotated[bool, typer.Option(help="First run cyclictest (rt-tests) on the loop's CPU with the same "
                                               "priority, period and duration: the platform's own wake-up "
                                               "latency, for comparison.")] = False,
    view: Annotated[Optional[int], typer.Option(help="Serve the live view on this TCP port during the run (open "
                                                    "it in a browser to measure the loop with a viewer).")] = None,
    patient: Annotated[Optional[str], typer.Option(help=PATIENT_HELP)] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Loopback run at the given period while this process scrapes the metrics endpoint; prints tick
    lateness percentiles, misses > 1 ms and CPU use of the real-time process."""
    from hil.bench.loop import loop_bench, loop_cpu
    from hil.patients import load_patient, patient_override

    with user_errors():
        if not (0.001 <= period <= 0.010):
            raise BadInputError(f"--period must be between 0.001 and 0.010 s, not {period!r}")
        check_duration(duration)
        if not 0.0 <= spin_us <= 5000.0:
            raise BadInputError(f"--spin-us must be between 0 and 5000, not {spin_us!r}")
        if view is not None:
            check_port("--view", view)
        if patient is not None:
            load_patient(patient)              # one error line for a bad preset or file, before the run
    cpu = loop_cpu()
    floor = _platform_baseline(cpu, period, duration) if baseline else None
    with err_console().status(f"loop at {period * 1e3:g} ms for {duration:g} s, scraping every {scrape_interval:g} s"):
        doc = loop_bench(period, duration, scrape_interval, spin_us, cpu, view, patient_override(patient))
    if "error" in doc:
        error(doc["error"])
        raise typer.Exit(ExitCode.ERROR)
    if floor is not None:
        doc["baseline"] = floor
    if json_out:
        print_json(doc)
    else:
        bench_tables.print_loop(doc, cpu)


def _platform_baseline(cpu: int, period: float, duration: float) -> dict:
    """cyclictest before the loop run (:func:`hil.bench.platform.platform_baseline`); a warning where it fails."""
    from hil.bench.loop import LOOP_PRIORITY
    from hil.bench.platform import platform_baseline

    with err_console().status(f"platform baseline: cyclictest on cpu{cpu} for {duration:g} s"):
        floor = platform_baseline(cpu, LOOP_PRIORITY, period, duration)
    if "error" in floor:
        warn(f"no platform baseline: {floor['error']}")
    return floor


@app.command("link")
def bench_link(
    transport: Annotated[str, typer.Option(help="can, serial (RehaStim2), p24-mid or p24-low (P24 mid-level "
                                                "updates or low-level pulses), or lsl (Lab Streaming Layer: "
                                                "command sample -> applied, tick -> outlet sample).")] = "can",
    rate: Annotated[Optional[list[float]], typer.Option(help="Loop rate(s), Hz (default: 250 and 1000; lsl: 100 "
                                                             "and 1000).")] = None,
    duration: Annotated[float, typer.Option(help="Measured length per rate, s.")] = 30.0,
    feedback: Annotated[str, typer.Option(
        help="CAN feedback set: auto (full up to 250 Hz, status above), status, angles (status + joint "
             "angles), full, or fd (HIL_SensorFD: status, q, q velocities and thoracohumeral angles in one "
             "CAN FD frame).")] = "auto",
    baseline: Annotated[bool, typer.Option(
        "--baseline", help="Before each rate, measure the floor without the HIL: the link's endpoint code "
                           "alone answers on the transport on its own clock (no loop, no plant), with the "
                           "same peer.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Round trip through a transport: an external controller process sends a command every tick and
    times the feedback that echoes it; prints round-trip p50/p99/max and lost feedback frames."""
    from hil.bench.link import FEEDBACK_SETS, link_bench_result, measure_link

    with user_errors():
        if transport not in ("can", "serial", "p24-mid", "p24-low", "lsl"):
            raise BadInputError(f"--transport must be can, serial, p24-mid, p24-low or lsl, not {transport!r}")
        if transport == "lsl" and baseline:
            raise BadInputError("--baseline measures a link's endpoint alone; the lsl transport has none")
        check_duration(duration)
        if feedback != "auto" and feedback not in FEEDBACK_SETS:
            raise BadInputError(f"--feedback must be auto, {', '.join(FEEDBACK_SETS)}; not {feedback!r}")
        rates = rate or ([100.0, 1000.0] if transport == "lsl" else [250.0, 1000.0])
        for r in rates:
            if not 100.0 <= r <= 1000.0:
                raise BadInputError(f"--rate must be between 100 and 1000 Hz (1-10 ms periods), not {r!r}")

    def measured(r: float, floor: bool) -> dict:
        what = "baseline (no HIL)" if floor else "link"
        with err_console().status(f"{transport} {what} at {r:g} Hz for {duration:g} s ..."):
            return measure_link(transport, r, duration, feedback, baseline=floor)

    runs = []
    for r in rates:
        floor = measured(r, True) if baseline else None
        run = measured(r, False)
        if floor is not None:
            run["baseline"] = floor
        runs.append(run)
    doc = link_bench_result(transport, runs)
    if json_out:
        print_json(doc)
    else:
        if transport == "lsl":
            bench_tables.print_lsl_table(doc, duration)
        else:
            bench_tables.print_link_table(doc, duration, baseline)
        bench_tables.print_link_notes(doc, baseline)
    errors = [r["error"] for run in runs for r in (run.get("baseline") or {}, run) if "error" in r]
    if errors:
        for e in errors:
            error(e)
        raise typer.Exit(ExitCode.ERROR)


@app.command("accuracy")
def bench_accuracy(
    step: Annotated[float, typer.Option(help="Rosenbrock step size h, s.")] = 0.003,
    duration: Annotated[float, typer.Option(help="Ramp duration (all excitations 0 -> 1), s.")] = 0.5,
    rtol: Annotated[float, typer.Option(help="Relative tolerance of the reference solver, 1e-10 to 1e-2.")] = 1e-8,
    scheme: Annotated[str, typer.Option(help=SCHEME_HELP)] = "activation",
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Joint-angle error of the fixed-step Rosenbrock plant against a stiff variable-step reference.

    The issue's fidelity test: all 138 excitations ramp 0 -> 1 over the duration from the published
    equilibrium; the reference is scipy's Radau on the same implicit equations with exact Jacobians.
    """
    from hil.bench.accuracy import accuracy_result, plant_angles, reference_angles

    with user_errors():
        h = positive("--step", step)
        T = check_duration(duration)
        if not 1e-10 <= rtol <= 1e-2:
            raise BadInputError(f"--rtol must be in [1e-10, 1e-2], not {rtol:g}")
        from sim.das3.config import ModelConfig
        from sim.das3.model import load_model

        model = load_model(ModelConfig())
        q_plant = plant_angles(model, h, T, scheme)
        t0 = time.perf_counter()
        with err_console().status("reference solution (Radau) ..."):
            q_reference, info = reference_angles(model, h, T, rtol)
        doc = accuracy_result(model, h, T, scheme, rtol, q_plant, q_reference, info, time.perf_counter() - t0)
    if json_out:
        print_json(doc)
        return
    table = Table(title=f"Rosenbrock ({scheme}) h = {h * 1e3:g} ms vs Radau (rtol {rtol:g}), ramp 0 -> 1 over {T:g} s")
    table.add_column("DOF")
    table.add_column("RMS error (deg)", justify="right")
    for name, v in doc["rms_deg_per_dof"].items():
        table.add_row(name, f"{v:.3f}")
    table.add_row("all", f"{doc['rms_deg']:.3f}")
    console = out_console()
    console.print(table)
    console.print(f"max |error| {doc['max_abs_deg']:.3f} deg; reference: {info['nfev']} evaluations, "
                  f"{info['njev']} Jacobians, {doc['reference']['wall_s']:.0f} s")


@app.command("sweep")
def bench_sweep(
    sweep_file: Annotated[Optional[Path], typer.Argument(
        help="Sweep file (default: a built-in sweep of configs/elbow-hold.toml, 8 gains x 8 sensor-noise seeds, "
             "5 s each).")] = None,
    workers: Annotated[Optional[int], typer.Option(help="Local Dask workers, one thread each (default: one per "
                                                        "CPU; at most 256).")] = None,
    scheduler: Annotated[Optional[str], typer.Option(help="An existing Dask scheduler, tcp://HOST:PORT (instead "
                                                          "of a local cluster).")] = None,
    runs: Annotated[Optional[int], typer.Option(help="Runs of the built-in sweep (default 64; at most 100000).")] = None,
    duration: Annotated[Optional[float], typer.Option(help="Simulated s per run (default: 5, or the file's).")] = None,
    serial_runs: Annotated[int, typer.Option(help="Whole runs back to back in this process first, the serial "
                                                  "reference (0: none; at most 1000).")] = 8,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Run a sweep on Dask and compare its wall time with the single-run total over the workers: the scaling
    efficiency (goal: wall within 1.3x of the ideal), the serial reference, each worker's warm-up, the steal."""
    from hil.bench.sweep import DEFAULT_RUNS, default_spec, sweep_bench, with_duration
    from hil.sweep.spec import load_sweep
    from hil.sweep.worker import MAX_LOCAL_WORKERS

    with user_errors():
        if workers is not None:
            count("--workers", workers, 1, MAX_LOCAL_WORKERS)
        if workers is not None and scheduler is not None:
            raise BadInputError("--workers is for a local cluster; the cluster of --scheduler has its own")
        if runs is not None:
            count("--runs", runs, 1, 100_000)
        if runs is not None and sweep_file is not None:
            raise BadInputError("--runs sizes the built-in sweep; a sweep file's runs are its grid and [random]")
        if duration is not None and not (math.isfinite(duration) and 0.0 < duration <= 3600.0):
            raise BadInputError(f"--duration must be a number in (0, 3600] s, not {duration!r}")
        count("--serial-runs", serial_runs, 0, 1000)
        spec = default_spec(runs or DEFAULT_RUNS) if sweep_file is None else load_sweep(str(sweep_file))
        spec = with_duration(spec, duration)
        progress = Progress(TextColumn("sweep"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                            console=err_console(), disable=not err_console().is_terminal)
        task = progress.add_task("runs", total=None)
        with progress:
            doc = sweep_bench(spec, workers, scheduler, serial_runs,
                              lambda done, total: progress.update(task, completed=done, total=total))
    if json_out:
        print_json(doc)
    else:
        bench_tables.print_sweep(doc)
    failed = doc["error_runs"] + len((doc["serial"] or {}).get("errors", []))
    if failed:
        first = (doc["errors"] or doc["serial"]["errors"])[0]
        error(f"{failed} run(s) of the benchmark ended in an error row, so its figures do not measure the sweep; "
              f"first: {first}")
        raise typer.Exit(ExitCode.ERROR)


@app.command("analysis")
def bench_analysis(
    tasks: Annotated[str, typer.Option(help="Maximum-moment tasks to sweep, comma-separated (default: all ten; "
                                            "'none' for none).")] = "all",
    angles_every: Annotated[int, typer.Option(help="Sweep every N-th angle of each task's default sweep.")] = 1,
    criteria: Annotated[str, typer.Option(help="Static-optimisation criteria to time, letters of abcd ('' for "
                                               "none).")] = "abcd",
    elevations: Annotated[str, typer.Option(help="Static-optimisation humeral elevations, deg, comma-separated "
                                                 "(plane of elevation 60 deg).")] = "30,60,90",
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Time the analyses: static optimisation at a few postures (criteria a-d) and each maximum-moment task's
    default sweep (goals: <= 1 s per posture, <= 60 s per sweep), with iteration counts, the CPU and the steal."""
    from hil.bench.analysis import analysis_bench
    from sim.analysis.max_moment import TASKS
    from sim.analysis.static_opt import CRITERIA

    with user_errors():
        names = list(TASKS) if tasks == "all" else [] if tasks == "none" else [t.strip() for t in tasks.split(",")]
        unknown = [t for t in names if t not in TASKS]
        if unknown:
            raise BadInputError(f"--tasks: unknown task {unknown[0]!r} (one of {', '.join(TASKS)})")
        if angles_every < 1:
            raise BadInputError(f"--angles-every must be >= 1, not {angles_every}")
        if any(c not in CRITERIA for c in criteria):
            raise BadInputError(f"--criteria must be letters of {''.join(CRITERIA)}, not {criteria!r}")
        postures = _elevations_deg(elevations)
        doc = analysis_bench(names, angles_every, criteria, postures)
    if json_out:
        print_json(doc)
    else:
        _print_analysis(doc)


def _elevations_deg(text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise BadInputError(f"--elevations must be comma-separated numbers (deg), not {text!r}") from None
    if not all(math.isfinite(v) and 0.0 <= v <= 180.0 for v in values):
        raise BadInputError(f"--elevations must be angles in [0, 180] deg, not {text!r}")
    return values


def _print_analysis(doc: dict) -> None:
    console = out_console()
    if doc["static"]:
        table = Table(title="Static optimisation, one posture each (cold start; goal <= 1 s)")
        for col in ("criterion", "elevation (deg)", "time (s)", "iterations", "cost", "checks"):
            table.add_column(col, justify="right")
        for r in doc["static"]:
            table.add_row(r["criterion"], f"{r['elevation_deg']:g}", f"{r['wall_s']:.2f}", str(r["iterations"]),
                          f"{r['cost']:.4g}", "passed" if r["passed"] else "FAILED")
        console.print(table)
    if doc["sweeps"]:
        table = Table(title=f"Maximum-moment sweeps (default settings, {doc['workers']} worker(s); "
                            "goal <= 60 s per task)")
        table.add_column("task", no_wrap=True, min_width=max(len(s["task"]) for s in doc["sweeps"]))
        for col in ("angles", "solves", "wall (s)", "CPU (s)", "s per solve", "iterations per point", "failed"):
            table.add_column(col, justify="right")
        for s in doc["sweeps"]:
            its = " ".join(str(p["iterations"]) for p in s["points"])
            failed = ", ".join(f"{p['angle_deg']:g}" for p in s["points"] if not p["passed"]) or "-"
            table.add_row(s["task"], str(len(s["points"])), str(s["solves"]), f"{s['wall_s']:.1f}",
                          f"{s['cpu_s']:.1f}", f"{s['wall_s'] / max(s['solves'], 1):.2f}", its, failed)
        console.print(table)
    console.print(f"CPU: {doc['cpu']} ({doc['cpu_count']} logical), load average "
                  f"{', '.join(f'{v:.2f}' for v in doc['load_average'])}, steal over the run: {doc['steal_ms']} ms; "
                  f"Python {doc['python']}, numpy {doc['numpy']}, numba {doc['numba']}")


app.command("gym")(bench_gym.bench_gym)
app.command("peer-setup")(bench_gym.bench_peer_setup)
