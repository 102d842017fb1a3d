"""``hil simulate``: the plant offline under an excitation schedule, outputs to CSV."""
from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Annotated, Optional

import numpy as np
import typer
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeRemainingColumn

from hil.cli.common import (
    SCHEME_HELP,
    BadInputError,
    ExitCode,
    check_duration,
    check_output_path,
    err_console,
    error,
    key_value_table,
    load_model_options,
    out_console,
    positive,
    user_errors,
)
from hil.recording.files import OutputRecorder, load_model_state
from sim.das3.excitations import load_excitation_csv

PROGRESS_INTERVAL_S = 0.05  # refresh the progress bar at most ~20 times per second
MAX_SIMULATE_STEPS = 1e7   # hil simulate keeps every step's outputs in memory (about 0.4 kB a step)


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
    scheme: Annotated[str, typer.Option(help=SCHEME_HELP)] = "activation",
) -> None:
    """Simulate the plant offline under an excitation schedule and write the outputs to CSV."""
    with user_errors():
        n_steps = _step_count(duration, step)
        check_output_path(out, "--out", inputs=(excitations, model_config, None if initial == "equilibrium" else initial))

        from sim.das3.model import load_model
        from sim.das3.plant import Plant

        model = load_model(load_model_options(model_config))
        schedule = load_excitation_csv(excitations, model.muscle_names)
        x0 = None if initial == "equilibrium" else load_model_state(initial, model)

        plant = Plant(model, step_s=step, initial_state=x0, scheme=scheme)
        t_warm = time.perf_counter()
        plant.warmup()
        warmup_s = time.perf_counter() - t_warm

        recorder = OutputRecorder(model.dof_names, n_steps + 1)
        recorder.record(0.0, plant.outputs)
        t_start = time.perf_counter()
        diverged, t = _run_steps(plant, schedule, recorder, n_steps, step)
        wall_s = time.perf_counter() - t_start
        recorder.save(out)

        if diverged is not None:
            error(f"plant diverged in the step to t = {t:.6g} s: {diverged}; wrote the "
                  f"{recorder.n_rows} rows before it to {out}")
            raise typer.Exit(ExitCode.DIVERGED)
        _print_summary(duration, step, n_steps, wall_s, warmup_s, plant, schedule, recorder, out)


def _step_count(duration: float, step: float) -> int:
    """round(T/h), checked: at least one step, at most MAX_SIMULATE_STEPS."""
    check_duration(duration)
    positive("--step", step)
    n_steps = round(duration / step)
    if n_steps < 1:
        raise BadInputError(f"--duration {duration} s is shorter than half a --step {step} s")
    if n_steps > MAX_SIMULATE_STEPS:
        raise BadInputError(f"--duration / --step = {n_steps:.3g} steps; at most {MAX_SIMULATE_STEPS:g}")
    return n_steps


def _run_steps(plant, schedule, recorder: OutputRecorder, n_steps: int, step: float):
    """Step the plant under the schedule, recording every step's outputs, with a progress bar on a
    terminal; (the PlantDivergedError that stopped it or None, the time of the last step tried)."""
    from sim.das3.plant import PlantDivergedError

    u = np.zeros(len(plant.model.muscle_names))
    err = err_console()
    progress = Progress(TextColumn("simulating"), BarColumn(), TaskProgressColumn(),
                        TimeRemainingColumn(), console=err, disable=not err.is_terminal)
    task = progress.add_task("simulate", total=n_steps)
    next_update = 0.0
    diverged = None
    t = 0.0
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
    return diverged, t


def _print_summary(duration: float, step: float, n_steps: int, wall_s: float, warmup_s: float, plant, schedule,
                   recorder: OutputRecorder, out: Path) -> None:
    sim_s = n_steps * step
    summary = key_value_table("hil simulate")
    if not math.isclose(sim_s, duration, rel_tol=0.0, abs_tol=1e-9):
        summary.add_row("note", f"--duration {duration} s is not a multiple of --step; "
                                f"simulated {sim_s:.6g} s")
    summary.add_row("steps", f"{n_steps} x {step * 1e3:g} ms = {sim_s:g} s simulated")
    summary.add_row("wall time", f"{wall_s:.3f} s (+ {warmup_s:.2f} s warm-up)")
    summary.add_row("real-time factor", f"{sim_s / wall_s:.2f}" if wall_s > 0 else "inf")
    summary.add_row("clipped excitations", f"{plant.clipped_total} (values outside [0, 1] in "
                                           f"the file: {schedule.n_out_of_range})")
    summary.add_row("output", f"{out} ({recorder.n_rows} rows)")
    out_console().print(summary)
