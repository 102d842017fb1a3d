"""The ``hil`` command line: offline simulation, model inspection and benchmarks.

Only command-line logic lives here; the numerics are in ``sim``. Errors caused by the user's input
(files, options, configuration) print one red line on stderr and exit with code 2; a diverged plant
exits with code 3. Neither prints a traceback.
"""
from __future__ import annotations

import contextlib
import gc
import json
import math
import os
import platform
import sys
import time
from pathlib import Path
from typing import Annotated, Optional

import numpy as np
import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from hil import __version__
from hil.files import OutputRecorder, StateFileError, load_state_file, write_state_json
from sim.config import ConfigError, ModelConfig, load_model_config
from sim.excitations import ExcitationFileError, load_excitation_csv

EXIT_BAD_INPUT = 2
EXIT_DIVERGED = 3
PROGRESS_INTERVAL_S = 0.05  # refresh the progress bar at most ~20 times per second
BENCH_STEPS_DEFAULT = (0.004, 0.001)
MAX_SIMULATE_STEPS = 1e7   # hil simulate keeps every step's outputs in memory (about 0.4 kB a step)

app = typer.Typer(name="hil", no_args_is_help=True, add_completion=False,
                  pretty_exceptions_show_locals=False,
                  help="FES hardware-in-the-loop testbed with the DAS3 shoulder/arm model as plant.")
model_app = typer.Typer(no_args_is_help=True, help="Inspect the DAS3 model.")
bench_app = typer.Typer(no_args_is_help=True, help="Measure the plant's speed.")
app.add_typer(model_app, name="model")
app.add_typer(bench_app, name="bench")
can_app = typer.Typer(no_args_is_help=True, help="The CAN message set (DBC).")
app.add_typer(can_app, name="can")


class BadInputError(ValueError):
    """An option value that cannot be used."""


def _stdout() -> Console:
    return Console()


def _stderr() -> Console:
    return Console(stderr=True)


def _error(message: str) -> None:
    _stderr().print(Text(f"Error: {message}", style="bold red"), soft_wrap=True)


def _run_exit(summary: dict) -> None:
    """The end of a finished run: one red line per problem (a lost driver, an incomplete recording), then
    exit 4 for a GH or ROM ``stop`` action (saying why), 5 for a run with problems, else 0."""
    from hil import service
    for problem in summary.get("problems", []):
        _error(problem)
    if summary["stopped_by"] in ("gh_unstable", "range_of_motion"):
        _error(f"safety stop ({summary['stopped_by']}) at tick {summary['ticks'] - 1}: {summary['stop_detail']}")
        raise typer.Exit(service.EXIT_SAFETY_STOP)
    if summary.get("problems"):
        raise typer.Exit(service.EXIT_INCOMPLETE)


def _check_recording_path(record: Path) -> None:
    """The recording's directory exists and takes a new file (read-only mounts and permissions included):
    checked before anything starts, so a run never warms up to fail on its recording."""
    import tempfile
    _check_output_path(record, "--record")
    if record.exists():
        raise BadInputError(f"--record {record} exists; recordings are never overwritten")
    try:
        fd, probe = tempfile.mkstemp(dir=record.resolve().parent, prefix=".hil-write-test-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise BadInputError(f"--record {record}: cannot write in {record.resolve().parent}: "
                            f"{exc.strerror or exc}") from None


def _exit_code(exc: BaseException) -> int | None:
    """Exit code for an error caused by the input or the plant, None for anything else (a bug)."""
    from drivers.base import DriverInitializationError
    bad_input: tuple[type[BaseException], ...] = (
        ConfigError, ExcitationFileError, StateFileError, BadInputError, OSError, DriverInitializationError)
    try:
        from sim.plant import InvalidInputError, PlantDivergedError
    except ImportError:
        pass
    else:
        if isinstance(exc, PlantDivergedError):
            return EXIT_DIVERGED
        bad_input += (InvalidInputError,)
    return EXIT_BAD_INPUT if isinstance(exc, bad_input) else None


def _describe(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
        return f"{exc.filename}: {exc.strerror}"
    return str(exc) or type(exc).__name__


@contextlib.contextmanager
def _user_errors():
    """Turn input and divergence errors into a red message and an exit code."""
    try:
        yield
    except typer.Exit:
        raise
    except Exception as exc:
        code = _exit_code(exc)
        if code is None:
            raise
        _error(_describe(exc))
        raise typer.Exit(code) from None


def _positive(option: str, value: float) -> float:
    if not (math.isfinite(value) and value > 0.0):
        raise BadInputError(f"{option} must be a finite number > 0, not {value!r}")
    return value


def _duration(value: float) -> float:
    """A run's --duration: > 0 and at most MAX_RUN_DURATION_S (30 days; see hil.config)."""
    from hil.config import MAX_RUN_DURATION_S
    if not (math.isfinite(value) and 0.0 < value <= MAX_RUN_DURATION_S):
        raise BadInputError(f"--duration must be a number in (0, {MAX_RUN_DURATION_S:g}] s (30 days), not {value!r}")
    return value


def _load_config(path: Optional[Path]) -> ModelConfig:
    return ModelConfig() if path is None else load_model_config(path)


def _check_output_path(path: Path, option: str) -> None:
    parent = path.resolve().parent
    if not parent.is_dir():
        raise BadInputError(f"{option} {path}: directory {parent} does not exist")
    if path.is_dir():
        raise BadInputError(f"{option} {path} is a directory")


def _clear_port_file(port_file: Optional[Path]) -> None:
    """Check where ``--port-file`` goes and remove an earlier run's file, so that a controller waiting
    for the file never reads stale ports (it appears once the loop is about to start)."""
    if port_file is not None:
        _check_output_path(port_file, "--port-file")
        port_file.unlink(missing_ok=True)


def _print_json(doc) -> None:
    sys.stdout.write(json.dumps(doc, indent=2) + "\n")


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"hil (fes-hil) {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[bool, typer.Option("--version", callback=_version_callback, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """FES hardware-in-the-loop testbed with the DAS3 shoulder/arm model as plant."""


# --------------------------------------------------------------------------------------------------
# hil simulate

@app.command()
def simulate(
    excitations: Annotated[Path, typer.Option(
        "--excitations", "-e", help="Excitation CSV: 'time' column (s) + one column per muscle.")],
    duration: Annotated[float, typer.Option(help="Simulated time T, s.")],
    step: Annotated[float, typer.Option(help="Integration step h, s. round(T/h) steps are taken.")],
    out: Annotated[Path, typer.Option(help="Output CSV (one row per step plus the initial row).")],
    initial: Annotated[str, typer.Option(
        help="'equilibrium' (the published passive equilibrium) or a state file: JSON with key "
             "'x' or a one-row CSV, 298 values.")] = "equilibrium",
    model_config: Annotated[Optional[Path], typer.Option(
        help="Model options TOML (see configs/model.toml); default: the published values.")] = None,
    scheme: Annotated[str, typer.Option(
        help="Integration scheme: 'activation' (default; eq. 8 with implicit activation and fibre "
             "correction, robust to abrupt excitation) or 'paper' (eq. 8 exactly).")] = "activation",
) -> None:
    """Simulate the plant offline under an excitation schedule and write the outputs to CSV."""
    with _user_errors():
        _duration(duration)
        _positive("--step", step)
        n_steps = round(duration / step)
        if n_steps < 1:
            raise BadInputError(f"--duration {duration} s is shorter than half a --step {step} s")
        if n_steps > MAX_SIMULATE_STEPS:
            raise BadInputError(f"--duration / --step = {n_steps:.3g} steps; at most {MAX_SIMULATE_STEPS:g}")
        _check_output_path(out, "--out")

        from sim.model import load_model
        from sim.plant import Plant, PlantDivergedError

        model = load_model(_load_config(model_config))
        schedule = load_excitation_csv(excitations, model.muscle_names)
        x0 = None if initial == "equilibrium" else load_state_file(initial, model.n_states)

        plant = Plant(model, step_s=step, initial_state=x0, scheme=scheme)
        t_warm = time.perf_counter()
        plant.warmup()
        warmup_s = time.perf_counter() - t_warm

        recorder = OutputRecorder(model.dof_names, n_steps + 1)
        recorder.record(0.0, plant.outputs)
        u = np.zeros(len(model.muscle_names))
        err = _stderr()
        progress = Progress(TextColumn("simulating"), BarColumn(), TaskProgressColumn(),
                            TimeRemainingColumn(), console=err, disable=not err.is_terminal)
        task = progress.add_task("simulate", total=n_steps)
        next_update = 0.0
        diverged = None
        t = 0.0
        t_start = time.perf_counter()
        with progress:
            for n in range(n_steps):
                t = (n + 1) * step
                schedule.fill(t, u)
                try:
                    plant.step(u)
                except PlantDivergedError as exc:
                    diverged = exc
                    break
                recorder.record(t, plant.outputs)
                now = time.perf_counter()
                if now >= next_update:
                    progress.update(task, completed=n + 1)
                    next_update = now + PROGRESS_INTERVAL_S
            progress.update(task, completed=recorder.n_rows - 1)
        wall_s = time.perf_counter() - t_start
        recorder.save(out)

        if diverged is not None:
            _error(f"plant diverged in the step to t = {t:.6g} s: {diverged}; wrote the "
                   f"{recorder.n_rows} rows before it to {out}")
            raise typer.Exit(EXIT_DIVERGED)

        sim_s = n_steps * step
        summary = Table(title="hil simulate", show_header=False)
        summary.add_column(style="bold")
        summary.add_column()
        if not math.isclose(sim_s, duration, rel_tol=0.0, abs_tol=1e-9):
            summary.add_row("note", f"--duration {duration} s is not a multiple of --step; "
                                    f"simulated {sim_s:.6g} s")
        summary.add_row("steps", f"{n_steps} x {step * 1e3:g} ms = {sim_s:g} s simulated")
        summary.add_row("wall time", f"{wall_s:.3f} s (+ {warmup_s:.2f} s warm-up)")
        summary.add_row("real-time factor", f"{sim_s / wall_s:.2f}" if wall_s > 0 else "inf")
        summary.add_row("clipped excitations", f"{plant.clipped_total} (values outside [0, 1] in "
                                               f"the file: {schedule.n_out_of_range})")
        summary.add_row("output", f"{out} ({recorder.n_rows} rows)")
        _stdout().print(summary)


# --------------------------------------------------------------------------------------------------
# hil run / check-config

@app.command("check-config")
def check_config(
    config: Annotated[Path, typer.Argument(help="Service/experiment config (TOML).")],
    show: Annotated[bool, typer.Option("--show", help="Print the effective config (includes merged) as TOML on "
                                                      "stdout; the OK line goes to stderr.")] = False,
) -> None:
    """Validate a service config: every error names the file, the key and the reason."""
    with _user_errors():
        from hil.config import load_service_config
        from hil.service import build_engine

        cfg = load_service_config(config)
        model, engine, drivers = build_engine(cfg)
        for d in drivers:
            d.shutdown()
    if show:     # the merged document that runs record; tomllib reads it back unchanged
        import tomli_w
        sys.stdout.write(f"# effective config of {str(config)!r} (includes merged; relative file names are "
                         f"relative to {str(config.resolve().parent)!r})\n" + tomli_w.dumps(cfg.raw))
    (_stderr() if show else _stdout()).print(f"[green]{config}: OK[/green] — period {cfg.loop.period_s * 1e3:g} ms x "
                    f"{cfg.loop.substeps} sub-steps, {engine.n_channels or 'direct'} "
                    f"{'channels' if engine.n_channels else 'excitation mode'}, "
                    f"{len(cfg.drivers)} driver(s): {', '.join(d['type'] for d in cfg.drivers) or 'none'}")


@app.command()
def run(
    config: Annotated[Path, typer.Option(help="Service/experiment config (TOML), e.g. configs/loopback.toml.")],
    duration: Annotated[Optional[float], typer.Option(help="Run length, s (default: until Ctrl-C).")] = None,
    record: Annotated[Optional[Path], typer.Option(
        help="Recording file (default: <recording.directory>/run-<UTC time>.hilrec if recording is enabled).")] = None,
    make_report: Annotated[bool, typer.Option("--report", help="Write the PNG report next to the recording.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the run summary as JSON.")] = False,
    port_file: Annotated[Optional[Path], typer.Option(
        help="Write the ports controllers connect to (JSON, e.g. the announced serial ptys) to this file once "
             "the loop is about to start; an existing file is removed first.")] = None,
) -> None:
    """Run a real-time experiment: the loop runs in its own process, this one shows progress.

    Exit status: 0 done, 1 error, 2 bad config, 4 stopped by a safety 'stop' action."""
    from hil import service

    with _user_errors():
        from hil.config import load_service_config

        cfg = load_service_config(config)
        if duration is not None:
            _duration(duration)
        if record is None and cfg.recording.enabled:
            stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
            record = Path(cfg.recording.directory) / f"run-{stamp}.hilrec"
            record.parent.mkdir(parents=True, exist_ok=True)
        if record is not None:
            _check_recording_path(record)
        _clear_port_file(port_file)
    from hil.supervisor import supervise

    err = _stderr()
    total = None if duration is None else service.ticks_for(duration, cfg.loop.period_s)
    progress = Progress(TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(),
                        TextColumn("{task.fields[info]}"), console=err, disable=not err.is_terminal,
                        auto_refresh=False)
    task = progress.add_task("warming up", total=total, info="")
    next_draw = [0.0]

    def on_poll(status) -> None:
        now = time.monotonic()
        if now < next_draw[0]:
            return
        next_draw[0] = now + 0.1
        if status[service.STATUS_FIELDS.index("state")] >= service.STATE_RUNNING:
            progress.update(task, description="running", completed=status[0],
                            info=f"elbow {status[4]:.1f} deg  GH {status[3]:+.2f}")
        progress.refresh()

    with progress:
        summary = supervise(str(config), duration, record, on_poll=on_poll, port_file=port_file)
    if not summary.get("ok"):
        _error(summary["error"])
        raise typer.Exit(service.EXIT_CONFIG if summary.get("config_error") else service.EXIT_ERROR)
    if json_out:
        _print_json(summary)
    else:
        table = Table(title=f"hil run {config}", show_header=False)
        table.add_column(style="bold")
        table.add_column()
        lat = summary["lateness_us"]
        table.add_row("ticks", f"{summary['ticks']} x {cfg.loop.period_s * 1e3:g} ms (stopped by "
                               f"{summary['stopped_by']})")
        if lat:
            table.add_row("lateness (us)", f"p50 {lat['p50']:.1f}  p99 {lat['p99']:.1f}  p99.9 "
                                           f"{lat['p99.9']:.1f}  max {lat['max']:.1f}")
        table.add_row("deadline misses", str(summary["deadline_misses"]))
        rt = summary["realtime"]
        table.add_row("real-time", f"SCHED_FIFO {'yes' if rt['sched_fifo'] else 'no'}, mlock "
                                   f"{'yes' if rt['mlock'] else 'no'}")
        table.add_row("safety", f"watchdog trips {summary['watchdog_trips']}, GH unstable ticks "
                                f"{summary['gh_unstable_ticks']}, ROM alarm ticks {summary['rom_alarm_ticks']}")
        table.add_row("commands", f"{summary['commands_received']} accepted, rejected "
                                  f"{summary['commands_rejected'] or 'none'}, clamped "
                                  f"{summary['commands_clamped'] or 'none'}")
        table.add_row("final elbow flexion", f"{summary['final_elbow_deg']:.1f} deg")
        if summary.get("recording"):
            unwritten = sum(summary["records_unwritten"].values())
            table.add_row("recording", f"{summary['recording']} ({'complete' if not unwritten else 'INCOMPLETE: '}"
                                       f"{summary['records_unwritten'] if unwritten else ''})")
        if summary.get("drivers_lost"):
            table.add_row("drivers lost", ", ".join(summary["drivers_lost"]))
        _stdout().print(table)
        for w in rt["warnings"]:
            err.print(Text(f"warning: {w}", style="yellow"))
    if make_report and summary.get("recording"):
        report(Path(summary["recording"]), out=None, json_out=False)
    _run_exit(summary)


@app.command()
def serve(
    config: Annotated[Path, typer.Option(help="Service config (TOML).")],
    port_file: Annotated[Optional[Path], typer.Option(
        help="Write the ports controllers connect to (JSON) to this file once the loop is about to start; an "
             "existing file is removed first.")] = None,
) -> None:
    """Service mode (systemd Type=notify): run until SIGTERM; READY=1 once the loop runs, WATCHDOG=1
    while its ticks advance, STOPPING=1 on SIGTERM; the recording is closed before exiting."""
    from hil import service
    from hil.supervisor import supervise

    with _user_errors():
        from hil.config import load_service_config

        cfg = load_service_config(config)
        record = None
        if cfg.recording.enabled:
            record = Path(cfg.recording.directory) / time.strftime("run-%Y%m%dT%H%M%SZ.hilrec", time.gmtime())
            record.parent.mkdir(parents=True, exist_ok=True)
            _check_recording_path(record)
        _clear_port_file(port_file)
    summary = supervise(str(config), None, record, notify=True, port_file=port_file)
    if not summary.get("ok"):
        _error(summary["error"])
        raise typer.Exit(service.EXIT_CONFIG if summary.get("config_error") else service.EXIT_ERROR)
    _stderr().print(f"hil serve: stopped by {summary['stopped_by']} after {summary['ticks']} ticks"
                    + (f"; recording {summary['recording']}" if summary.get("recording") else ""))
    _run_exit(summary)


@app.command()
def export(
    run_file: Annotated[Path, typer.Argument(help="Recording (.hilrec).")],
    csv_out: Annotated[Path, typer.Option("--csv", help="Output CSV: one row per tick.")],
) -> None:
    """Export a recording to CSV: tick, time, the 11 DOFs (rad), gh_stability, status (bits: 1 watchdog,
    2 GH unstable, 4 overrun, 8 ROM alarm, 16 GH zeroed, 32 stopping, 64 ROM zeroed), u_<muscle> per muscle
    element, and per stimulation channel its applied pulse width (us), amplitude (mA), frequency (Hz)."""
    with _user_errors():
        from hil.recording import RecordingError, RecordingReader, export_csv

        try:
            reader = RecordingReader(run_file)
            _check_output_path(csv_out, "--csv")
            h = reader.header
            n = export_csv(reader, str(csv_out), h["muscle_names"], h["dof_names"], h["channel_names"])
        except RecordingError as exc:
            raise BadInputError(str(exc)) from None
    for w in reader.warnings:
        _stderr().print(Text(f"warning: {w}", style="yellow"))
    _stdout().print(f"{csv_out}: {n} ticks")


@app.command()
def report(
    run_file: Annotated[Path, typer.Argument(help="Recording (.hilrec).")],
    out: Annotated[Optional[Path], typer.Option(help="Directory for the PNG files and summary.json (default: next to the recording, without .hilrec).")] = None,
    json_out: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """PNG plots (joint angles, GH force in the glenoid ellipse, tick lateness) and a summary."""
    with _user_errors():
        from hil.recording import RecordingError
        from hil.report import make_report

        out_dir = out or run_file.with_suffix("")
        try:
            doc = make_report(str(run_file), str(out_dir))
        except RecordingError as exc:
            raise BadInputError(str(exc)) from None
    if json_out:
        _print_json(doc)
        return
    table = Table(title=f"hil report {run_file}", show_header=False)
    table.add_column(style="bold")
    table.add_column()
    table.add_row("ticks", f"{doc['ticks']} ({doc['duration_s']:.3f} s simulated)")
    table.add_row("lateness (us)", "p50 {p50:.1f}  p99 {p99:.1f}  max {max:.1f}".format(**doc["lateness_us"]))
    table.add_row("deadline misses", str(doc["deadline_misses"]))
    table.add_row("GH", f"max stability {doc['gh_stability_max']:+.3f}, unstable ticks {doc['gh_unstable_ticks']}")
    table.add_row("watchdog ticks", str(doc["watchdog_ticks"]))
    table.add_row("safety ticks", f"GH zeroed {doc['gh_zeroed_ticks']}, ROM alarm {doc['rom_alarm_ticks']}, "
                                  f"ROM zeroed {doc['rom_zeroed_ticks']}")
    table.add_row("elbow flexion (deg)", "{:.1f} .. {:.1f}".format(*doc["elbow_deg_range"]))
    table.add_row("commands", str(doc["commands"]))
    for name, f in doc["files"].items():
        table.add_row(name, f)
    _stdout().print(table)
    for w in doc["warnings"]:
        _stderr().print(Text(f"warning: {w}", style="yellow"))


@app.command()
def replay(run_file: Annotated[Path, typer.Argument(help="Recording (.hilrec).")],
           json_out: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Re-run the plant offline on the recorded inputs; report bit-identical or the first difference."""
    with _user_errors():
        from hil.recording import RecordingError
        from hil.replay import replay_recording

        try:
            result = replay_recording(str(run_file))
        except RecordingError as exc:
            raise BadInputError(str(exc)) from None
    if json_out:
        _print_json(result)
    else:
        if result["identical"]:
            _stdout().print(f"[green]bit-identical[/green]: {result['ticks']} ticks replayed")
        else:
            _stdout().print(f"[red]differs[/red] at tick {result['first_tick']}, field {result['field']!r} "
                            f"({result['ticks']} ticks compared)")
        for w in result["warnings"]:
            _stderr().print(Text(f"warning: {w}", style="yellow"))
    if not result["identical"]:
        raise typer.Exit(1)


# --------------------------------------------------------------------------------------------------
# hil model ...

@can_app.command("dbc")
def can_dbc(out: Annotated[Optional[Path], typer.Option(help="Write the DBC here (default: stdout).")] = None,
            channels: Annotated[int, typer.Option(help="Number of stimulation channels.")] = 8) -> None:
    """Generate the testbed's DBC from the model's DOF, muscle element and group names."""
    from drivers.can_dbc import generate_dbc
    from hil.service import muscle_groups
    from sim.model import load_model

    model = load_model()
    text = generate_dbc(model.dof_names, model.muscle_names, list(muscle_groups(model.muscle_names)), channels)
    if out is None:
        sys.stdout.write(text)
    else:
        out.write_text(text)


@can_app.command("table")
def can_table(dbc: Annotated[Path, typer.Option(help="DBC file (default: the project's configs/fes-hil.dbc).")]
              = Path(__file__).resolve().parents[1] / "configs" / "fes-hil.dbc") -> None:
    """Print the message table of a DBC file as Markdown (the README's table)."""
    import cantools

    from drivers.can_dbc import message_table
    with _user_errors():
        if not dbc.is_file():
            raise BadInputError(f"--dbc {dbc} not found")
        sys.stdout.write(message_table(cantools.database.load_file(str(dbc))))


@model_app.command("info")
def model_info(
    json_out: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
) -> None:
    """List the DOFs with their ranges and the muscle elements with the DOFs they cross."""
    with _user_errors():
        from sim.model import load_model

        model = load_model(ModelConfig())
    dof_names = model.dof_names
    ranges_deg = np.degrees(model.dof_ranges)
    muscles = [
        {"index": i, "name": name, "dofs": [dof_names[j] for j in dofs], "dof_indices": list(dofs),
         "crosses_gh": bool(model.crosses_gh[i])}
        for i, (name, dofs) in enumerate(zip(model.muscle_names, model.muscle_dof_indices))
    ]
    gh_names = [m["name"] for m in muscles if m["crosses_gh"]]
    if json_out:
        _print_json({
            "n_states": int(model.n_states),
            "dofs": [{"index": i, "name": name, "range_deg": ranges_deg[i].tolist(),
                      "range_rad": model.dof_ranges[i].tolist()} for i, name in enumerate(dof_names)],
            "muscles": muscles,
            "muscles_crossing_gh": gh_names,
        })
        return

    console = _stdout()
    dofs = Table(title=f"DAS3 DOFs ({model.n_states} states)")
    dofs.add_column("#", justify="right")
    dofs.add_column("DOF")
    dofs.add_column("min (deg)", justify="right")
    dofs.add_column("max (deg)", justify="right")
    for i, name in enumerate(dof_names):
        dofs.add_row(str(i), name, f"{ranges_deg[i, 0]:.1f}", f"{ranges_deg[i, 1]:.1f}")
    console.print(dofs)

    table = Table(title=f"Muscle elements ({len(muscles)}; {len(gh_names)} cross GH)")
    table.add_column("#", justify="right")
    table.add_column("muscle")
    table.add_column("DOFs crossed")
    table.add_column("crosses GH", justify="center")
    for m in muscles:
        table.add_row(str(m["index"]), m["name"], " ".join(m["dofs"]), "yes" if m["crosses_gh"] else "")
    console.print(table)


@model_app.command("equilibrium")
def model_equilibrium(
    model_config: Annotated[Optional[Path], typer.Option(
        help="Model options TOML (see configs/model.toml); default: the published values.")] = None,
    out: Annotated[Optional[Path], typer.Option(
        help="Write the 298-value state as JSON (usable with 'hil simulate --initial').")] = None,
    start: Annotated[str, typer.Option(
        help="Initial guess: 'published' (the published equilibrium), 'mid-range' (every DOF at the "
             "middle of its range, a rough posture) or 'rounded' (published angles rounded to 5 deg).")
    ] = "published",
    json_out: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
) -> None:
    """Solve the passive equilibrium (zero excitation) and report posture, residual and GH force."""
    with _user_errors():
        if out is not None:
            _check_output_path(out, "--out")
        from sim.equilibrium import solve_equilibrium
        from sim.model import load_model

        model = load_model(_load_config(model_config))
        q_published = np.asarray(model.equilibrium_state[: model.n_dof])
        guesses = {"published": None, "mid-range": model.dof_ranges.mean(axis=1),
                   "rounded": np.round(q_published / math.radians(5.0)) * math.radians(5.0)}
        if start not in guesses:
            raise BadInputError(f"--start must be one of {', '.join(guesses)}, not {start!r}")
        t0 = time.perf_counter()
        res = solve_equilibrium(model, x_guess=guesses[start])
        solve_s = time.perf_counter() - t0
        dq_published_deg = float(np.degrees(np.abs(res.x[: model.n_dof] - q_published)).max())
        if out is not None:
            write_state_json(out, res.x, (
                f"Passive equilibrium (zero excitation) from 'hil model equilibrium', fes-hil "
                f"{__version__}, model config {model_config or 'defaults'}; residual RMS "
                f"{res.residual_rms:.3g}. x = [q(11), qdot(11), s(138), a(138)], SI units, rad."))

    q_deg = np.degrees(np.asarray(res.x[: len(model.dof_names)]))
    gh_force = [float(v) for v in res.gh_force]
    if json_out:
        _print_json({
            "q_deg": {name: float(v) for name, v in zip(model.dof_names, q_deg)},
            "residual_rms": float(res.residual_rms),
            "iterations": int(res.iterations),
            "start": start,
            "max_abs_dq_from_published_deg": dq_published_deg,
            "solve_time_s": solve_s,
            "gh_force_N_scapula": gh_force,
            "gh_theta_deg": math.degrees(res.gh_theta),
            "gh_phi_deg": math.degrees(res.gh_phi),
            "gh_stability": float(res.gh_stability),
            "out": None if out is None else str(out),
        })
        return

    summary = Table(title="Passive equilibrium (zero excitation)", show_header=False)
    summary.add_column(style="bold")
    summary.add_column()
    for name, v in zip(model.dof_names, q_deg):
        summary.add_row(f"{name} (deg)", f"{v:.3f}")
    summary.add_row("residual RMS", f"{res.residual_rms:.3g}")
    summary.add_row("iterations", f"{res.iterations} from '{start}' ({solve_s:.2f} s)")
    summary.add_row("max |q - published| (deg)", f"{dq_published_deg:.2g}")
    summary.add_row("GH force (N, scapula frame)", "({:.2f}, {:.2f}, {:.2f})".format(*gh_force))
    summary.add_row("glenoid angles (deg)", f"theta {math.degrees(res.gh_theta):.2f} (superior +), "
                                            f"phi {math.degrees(res.gh_phi):.2f}")
    summary.add_row("GH stability", f"{res.gh_stability:.3f} (-1 centred, 0 rim, > 0 outside)")
    if out is not None:
        summary.add_row("state written to", str(out))
    _stdout().print(summary)


# --------------------------------------------------------------------------------------------------
# hil bench ...

def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _steal_s(cpu: int) -> float | None:
    """Time the hypervisor ran something else while ``cpu`` had work (``steal`` column of
    /proc/stat, proc(5)), s; None where the kernel does not report it."""
    try:
        with open("/proc/stat", encoding="utf-8") as fh:
            for line in fh:
                fields = line.split()
                if fields[0] == f"cpu{cpu}" and len(fields) > 8:
                    return int(fields[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError):
        pass
    return None


def _time_steps(plant, u: np.ndarray, n_steps: int) -> np.ndarray:
    """Duration of each of ``n_steps`` plant steps, ns, with the cyclic GC off."""
    durations = np.empty(n_steps, dtype=np.int64)
    clock = time.perf_counter_ns
    gc_was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for i in range(n_steps):
            t0 = clock()
            plant.step(u)
            durations[i] = clock() - t0
    finally:
        if gc_was_enabled:
            gc.enable()
    return durations


@bench_app.command("plant")
def bench_plant(
    step: Annotated[Optional[float], typer.Option(
        help="Step size h, s (default: 0.004 and 0.001).")] = None,
    steps: Annotated[int, typer.Option(help="Timed steps per step size.")] = 5000,
    excitation: Annotated[float, typer.Option(
        help="Constant excitation of every muscle during the run.")] = 0.05,
    scheme: Annotated[str, typer.Option(
        help="Integration scheme: 'activation' (default; eq. 8 with implicit activation and fibre "
             "correction, robust to abrupt excitation) or 'paper' (eq. 8 exactly).")] = "activation",
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Time plant steps from the published equilibrium under a constant excitation."""
    import numba

    with _user_errors():
        step_sizes = BENCH_STEPS_DEFAULT if step is None else (_positive("--step", step),)
        if steps < 1:
            raise BadInputError(f"--steps must be >= 1, not {steps}")
        if not (math.isfinite(excitation) and 0.0 <= excitation <= 1.0):
            raise BadInputError(f"--excitation must be in [0, 1], not {excitation!r}")

        from sim.model import load_model
        from sim.plant import Plant

        model = load_model(ModelConfig())
        u = np.full(len(model.muscle_names), excitation)
        results = []
        for h in step_sizes:
            plant = Plant(model, step_s=h, scheme=scheme)
            plant.warmup()
            durations = _time_steps(plant, u, steps)
            results.append({
                "step_s": h,
                "median_step_us": float(np.median(durations)) / 1e3,
                "p99_step_us": float(np.percentile(durations, 99)) / 1e3,
                "max_step_us": float(durations.max()) / 1e3,
                "realtime_factor": steps * h / (float(durations.sum()) * 1e-9),
            })

    env = {"cpu": _cpu_model(), "cpu_count": os.cpu_count(), "python": platform.python_version(),
           "numpy": np.__version__, "numba": numba.__version__, "steps": steps,
           "excitation": excitation, "scheme": scheme}
    if json_out:
        doc = {**env, "results": results}
        if step is not None:
            doc.update({k: results[0][k] for k in
                        ("step_s", "median_step_us", "p99_step_us", "realtime_factor")})
        _print_json(doc)
        return

    console = _stdout()
    table = Table(title=f"Plant step time ({steps} steps from the published equilibrium, "
                        f"excitation {excitation:g}, GC off)")
    table.add_column("step (ms)", justify="right")
    table.add_column("median (µs)", justify="right")
    table.add_column("p99 (µs)", justify="right")
    table.add_column("max (µs)", justify="right")
    table.add_column("real-time factor", justify="right")
    for r in results:
        table.add_row(f"{r['step_s'] * 1e3:g}", f"{r['median_step_us']:.1f}", f"{r['p99_step_us']:.1f}",
                      f"{r['max_step_us']:.1f}", f"{r['realtime_factor']:.1f}")
    console.print(table)
    console.print(f"CPU: {env['cpu']} ({env['cpu_count']} logical), Python {env['python']}, "
                  f"numpy {env['numpy']}, numba {env['numba']}")


BENCH_LOOP_CONFIG = """
[loop]
period_ms = {period_ms}
substeps = {substeps}
spin_us = {spin_us}
cpu = {cpu}
priority = {priority}
[stimulation]
mode = "direct"
[safety]
watchdog_timeout_ms = 1000
[metrics]
enabled = true
port = {port}
[recording]
enabled = false
[[driver]]
type = "loopback"
controller = "playback"
file = "excitation.csv"
direct = true
rate_hz = 50
"""


BENCH_LOOP_PRIORITY = 80
"""SCHED_FIFO priority of the benchmark's loop (the ``[loop] priority`` default)."""


def _platform_baseline(cpu: int, period: float, duration: float) -> dict:
    """cyclictest on ``cpu`` at the loop's priority and period (:mod:`hil.bench_platform`), with the
    hypervisor steal during it; ``{"error": ...}`` where cyclictest is missing or fails."""
    import subprocess

    from hil import bench_platform

    before = _steal_s(cpu)
    try:
        with _stderr().status(f"platform baseline: cyclictest on cpu{cpu} for {duration:g} s"):
            result = bench_platform.run_cyclictest(cpu, BENCH_LOOP_PRIORITY, period, duration).as_dict()
    except (RuntimeError, ValueError, OSError, subprocess.TimeoutExpired) as exc:
        _stderr().print(Text(f"warning: no platform baseline: {exc}", style="yellow"))
        return {"error": str(exc)}
    after = _steal_s(cpu)
    result["steal_ms"] = None if before is None or after is None else round((after - before) * 1e3, 1)
    return result


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@bench_app.command("loop")
def bench_loop(
    period: Annotated[float, typer.Option(help="Loop period, s (1-10 ms).")] = 0.001,
    duration: Annotated[float, typer.Option(help="Measured run length, s.")] = 30.0,
    scrape_interval: Annotated[float, typer.Option(help="Scrape /metrics every this many s (0: never).")] = 0.1,
    spin_us: Annotated[float, typer.Option(help="[loop] spin_us: spin this long before each deadline "
                                                "(>= the period: never sleep).")] = 200.0,
    baseline: Annotated[bool, typer.Option(help="First run cyclictest (rt-tests) on the loop's CPU with the same "
                                               "priority, period and duration: the platform's own wake-up "
                                               "latency, for comparison.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Loopback run at the given period while this process scrapes the metrics endpoint; prints tick
    lateness percentiles, misses > 1 ms and CPU use of the real-time process."""
    import tempfile
    import urllib.request

    from hil import service
    from hil.config import min_substeps
    from hil.supervisor import ServiceRun

    with _user_errors():
        if not (0.001 <= period <= 0.010):
            raise BadInputError(f"--period must be between 0.001 and 0.010 s, not {period!r}")
        _duration(duration)
    work = Path(tempfile.mkdtemp(prefix="hil-bench-"))
    (work / "excitation.csv").write_text("time,bicl,bicb1,bicb2,triclong1\n0,0.05,0.05,0.05,0.02\n"
                                         "1,0.3,0.3,0.3,0.1\n2,0.05,0.05,0.05,0.02\n")
    port = _free_port()
    substeps = min_substeps(period)
    cfg_path = work / "bench.toml"
    cpu = (os.cpu_count() or 1) - 1  # the loop on the last CPU; supervisor and exporter elsewhere
    if not 0.0 <= spin_us <= 5000.0:
        _error(f"--spin-us must be between 0 and 5000, not {spin_us!r}")
        raise typer.Exit(2)
    cfg_path.write_text(BENCH_LOOP_CONFIG.format(period_ms=period * 1e3, substeps=substeps, port=port, cpu=cpu,
                                                 spin_us=spin_us, priority=BENCH_LOOP_PRIORITY))
    floor = _platform_baseline(cpu, period, duration) if baseline else None
    run = ServiceRun(str(cfg_path), duration)
    steal_before = _steal_s(cpu)
    scrapes = failures = 0
    state_i = service.STATUS_FIELDS.index("state")
    try:
        run.start()
        with _stderr().status(f"loop at {period * 1e3:g} ms for {duration:g} s, scraping every {scrape_interval:g} s"):
            while run.alive(scrape_interval if scrape_interval > 0 else 0.5):
                if scrape_interval > 0 and run.status[state_i] == service.STATE_RUNNING:
                    try:
                        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1).read()
                        scrapes += 1
                    except OSError:
                        failures += 1
        steal_after = _steal_s(cpu)
        summary = run.result(5.0)
    finally:
        run.close()
    if not summary.get("ok"):
        _error(summary["error"])
        raise typer.Exit(1)
    lat = summary["lateness_us"]
    steal_ms = None if steal_before is None or steal_after is None else round((steal_after - steal_before) * 1e3, 1)
    doc = {"period_s": period, "duration_s": duration, "spin_us": spin_us, "ticks": summary["ticks"],
           "p50_us": lat["p50"], "p99_us": lat["p99"], "p999_us": lat["p99.9"], "max_us": lat["max"],
           "misses_over_1ms": summary["late_over_1ms"], "deadline_misses": summary["deadline_misses"],
           "scrapes": scrapes, "scrape_failures": failures,
           "cpu_percent": 100.0 * summary["cpu_s"] / max(summary["wall_s"], 1e-9),
           "steal_ms_loop_cpu": steal_ms, "realtime": summary["realtime"], "cpu": _cpu_model()}
    if floor is not None:
        doc["baseline"] = floor
    if json_out:
        _print_json(doc)
        return
    table = Table(title=f"hil bench loop: {period * 1e3:g} ms period, {duration:g} s, {scrapes} scrapes")
    for k in ("p50_us", "p99_us", "p999_us", "max_us"):
        table.add_column(k.replace("_us", " (µs)").replace("p999", "p99.9"), justify="right")
    table.add_column("late > 1 ms", justify="right")
    table.add_column("CPU %", justify="right")
    table.add_row(*(f"{doc[k]:.1f}" for k in ("p50_us", "p99_us", "p999_us", "max_us")),
                  str(doc["misses_over_1ms"]), f"{doc['cpu_percent']:.0f}")
    _stdout().print(table)
    rt = doc["realtime"]
    _stdout().print(f"SCHED_FIFO {'yes' if rt['sched_fifo'] else 'no'}, mlock {'yes' if rt['mlock'] else 'no'}; "
                    f"CPU {doc['cpu']}")
    if steal_ms is not None:
        _stdout().print(f"hypervisor steal on the loop CPU (cpu{cpu}) during the run: {steal_ms:.0f} ms")
    if floor is not None and "error" in floor:
        _stdout().print(f"platform baseline: {floor['error']}")
    elif floor is not None:
        steal = "" if floor["steal_ms"] is None else f", steal {floor['steal_ms']:.0f} ms"
        _stdout().print(f"platform baseline (cyclictest, cpu{cpu}, FIFO {BENCH_LOOP_PRIORITY}, {duration:g} s before "
                        f"the run): p50 {floor['p50_us']:.0f} µs, p99 {floor['p99_us']:.0f} µs, p99.9 "
                        f"{floor['p999_us']:.0f} µs, max {floor['max_us']:.0f} µs, "
                        f"late > 1 ms {floor['over_1ms']}{steal}")


@bench_app.command("link")
def bench_link(
    transport: Annotated[str, typer.Option(help="can or serial.")] = "can",
    rate: Annotated[Optional[list[float]], typer.Option(help="Loop rate(s), Hz (default: 250 and 1000).")] = None,
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
    from hil.bench_link import run_link_bench

    with _user_errors():
        if transport not in ("can", "serial"):
            raise BadInputError(f"--transport must be 'can' or 'serial', not {transport!r}")
        _duration(duration)
        from hil.bench_link import FEEDBACK_SETS
        if feedback != "auto" and feedback not in FEEDBACK_SETS:
            raise BadInputError(f"--feedback must be auto, {', '.join(FEEDBACK_SETS)}; not {feedback!r}")
        rates = rate or [250.0, 1000.0]
        for r in rates:
            if not 100.0 <= r <= 1000.0:
                raise BadInputError(f"--rate must be between 100 and 1000 Hz (1-10 ms periods), not {r!r}")
    from hil.bench_platform import unbound_workqueue_cpus

    runs = []
    n_cpus = os.cpu_count() or 1
    def measured(r: float, floor: bool) -> dict:
        what = "baseline (no HIL)" if floor else "link"
        with _stderr().status(f"{transport} {what} at {r:g} Hz for {duration:g} s ..."):
            before = [_steal_s(c) for c in range(n_cpus)]
            run = run_link_bench(transport, r, duration, feedback, baseline=floor)
            after = [_steal_s(c) for c in range(n_cpus)]
        run["steal_ms"] = {f"cpu{c}": round((a - b) * 1e3, 1) for c, (b, a) in enumerate(zip(before, after))
                           if a is not None and b is not None}
        return run

    for r in rates:
        floor = measured(r, True) if baseline else None
        run = measured(r, False)
        if floor is not None:
            run["baseline"] = floor
        runs.append(run)
    doc = {"transport": transport, "runs": runs, "cpu": _cpu_model(), "loop_cpu": n_cpus - 1 if n_cpus > 1 else None,
           "workqueue_cpus": unbound_workqueue_cpus()}
    if json_out:
        _print_json(doc)
    else:
        table = Table(title=f"hil bench link --transport {transport} ({duration:g} s per rate); round trip = "
                            "command sent in answer to feedback -> feedback echoing it")
        for col in ("rate (Hz)", *(("run",) if baseline else ()), "commands", "p50 (ms)", "p99 (ms)", "max (ms)",
                    "goal p99 (ms)", "next tick %", "lost frames", "unanswered"):
            table.add_column(col, justify="right")
        for run in runs:
            for label, row in (("floor", run.get("baseline")), ("HIL", run)):
                if row is None:
                    continue
                what = (label,) if baseline else ()
                if "error" in row:
                    table.add_row("error", *what, row["error"])
                    continue
                table.add_row(f"{row['rate_hz']:g}", *what, str(row["commands_sent"]),
                              f"{row['rtt_p50_ms']:.2f}", f"{row['rtt_p99_ms']:.2f}", f"{row['rtt_max_ms']:.2f}",
                              f"{row['goal_rtt_p99_ms']:.2f}", f"{row['applied_next_tick_percent']:.1f}",
                              str(row["lost_frames"]), str(row["unanswered"]))
        _stdout().print(table)
        if baseline:
            _stdout().print("floor: the link's endpoint code alone answers the same peer on its own clock (no "
                            "loop process, no plant step, no shared-memory hop): what transport, link code and "
                            "scheduling give on this machine")
        for run in runs:
            if "feedback" in run:
                steal = ", ".join(f"{c} {ms:.0f} ms" for c, ms in run["steal_ms"].items())
                _stdout().print(f"{run['rate_hz']:g} Hz feedback: {', '.join(run['feedback'])}; loop lateness p99 "
                                f"{run['loop_lateness_p99_us']:.1f} µs, deadline misses {run['deadline_misses']}"
                                + (f"; hypervisor steal {steal}" if steal else ""))
                floor = run.get("baseline")
                if floor and "error" not in floor:
                    steal = ", ".join(f"{c} {ms:.0f} ms" for c, ms in floor["steal_ms"].items())
                    _stdout().print(f"  floor run: responder lateness p99 {floor['responder_lateness_p99_us']:.0f} µs"
                                    + (f"; hypervisor steal {steal}" if steal else ""))
                if run["lost_frames"]:
                    udp = run.get("udp_receive_buffer_overflows")
                    _stdout().print(f"  lost frames: {run['hil_frames_not_sent']} not sent by the HIL"
                                    + ("" if udp is None else f"; {udp} datagrams dropped by full UDP receive "
                                                              "buffers (the peer's or the link's)"))
        _stdout().print(f"CPU {doc['cpu']}")
        wq = doc["workqueue_cpus"]
        if transport == "serial" and wq is not None and doc["loop_cpu"] in wq:
            _stdout().print(f"note: kernel workers (unbound workqueues) may run on the loop's CPU {doc['loop_cpu']} "
                            f"(CPUs {wq}); serial round trips then wait for the loop - see systemd/README.md, "
                            "'Tuning the lab PC'")
    errors = [r["error"] for run in runs for r in (run.get("baseline") or {}, run) if "error" in r]
    if errors:
        for e in errors:
            _error(e)
        raise typer.Exit(1)


@bench_app.command("accuracy")
def bench_accuracy(
    step: Annotated[float, typer.Option(help="Rosenbrock step size h, s.")] = 0.003,
    duration: Annotated[float, typer.Option(help="Ramp duration (all excitations 0 -> 1), s.")] = 0.5,
    rtol: Annotated[float, typer.Option(help="Relative tolerance of the reference solver.")] = 1e-8,
    scheme: Annotated[str, typer.Option(
        help="Integration scheme: 'activation' (default; eq. 8 with implicit activation and fibre "
             "correction, robust to abrupt excitation) or 'paper' (eq. 8 exactly).")] = "activation",
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Joint-angle error of the fixed-step Rosenbrock plant against a stiff variable-step reference.

    The issue's fidelity test: all 138 excitations ramp 0 -> 1 over the duration from the published
    equilibrium; the reference is scipy's Radau on the same implicit equations with exact Jacobians.
    """
    with _user_errors():
        h = _positive("--step", step)
        T = _duration(duration)
        from sim.model import load_model
        from sim.plant import Plant
        from sim.reference import simulate_reference

        model = load_model(ModelConfig())
        n = int(round(T / h))
        t_eval = np.arange(n + 1) * h

        def ramp(t: float) -> np.ndarray:
            return np.full(model.n_muscles, min(1.0, t / T))

        plant = Plant(model, step_s=h, scheme=scheme)
        q_plant = np.empty((n + 1, model.n_dof))
        q_plant[0] = plant.outputs.q
        for k in range(1, n + 1):
            plant.step(ramp(k * h))
            q_plant[k] = plant.outputs.q
        t0 = time.perf_counter()
        with _stderr().status("reference solution (Radau) ..."):
            _, x_ref, info = simulate_reference(model, model.equilibrium_state, ramp, t_eval,
                                                rtol=rtol, atol=rtol / 10)
        err_deg = np.degrees(q_plant - x_ref[:, : model.n_dof])
    doc = {
        "step_s": h, "duration_s": T, "scheme": scheme, "reference": {"method": "Radau", "rtol": rtol, **info,
                                                    "wall_s": time.perf_counter() - t0},
        "rms_deg": float(np.sqrt(np.mean(err_deg ** 2))),
        "max_abs_deg": float(np.abs(err_deg).max()),
        "rms_deg_per_dof": dict(zip(model.dof_names, np.sqrt(np.mean(err_deg ** 2, axis=0)).tolist())),
    }
    if json_out:
        _print_json(doc)
        return
    table = Table(title=f"Rosenbrock ({scheme}) h = {h * 1e3:g} ms vs Radau (rtol {rtol:g}), ramp 0 -> 1 over {T:g} s")
    table.add_column("DOF")
    table.add_column("RMS error (deg)", justify="right")
    for name, v in doc["rms_deg_per_dof"].items():
        table.add_row(name, f"{v:.3f}")
    table.add_row("all", f"{doc['rms_deg']:.3f}")
    console = _stdout()
    console.print(table)
    console.print(f"max |error| {doc['max_abs_deg']:.3f} deg; reference: {info['nfev']} evaluations, "
                  f"{info['njev']} Jacobians, {doc['reference']['wall_s']:.0f} s")
