"""``hil check-config``, ``hil run`` and ``hil serve``: validate a service config, run it in real time."""
from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn
from rich.text import Text

from hil.cli.common import (
    BadInputError,
    ExitCode,
    check_duration,
    check_output_path,
    check_port,
    err_console,
    error,
    key_value_table,
    out_console,
    print_json,
    user_errors,
)
from hil.cli.recordings import report

if TYPE_CHECKING:
    from hil.service.run_result import RunResult


def _run_exit(summary: RunResult) -> None:
    """The end of a finished run: one red line per problem (a lost driver, an incomplete recording), then
    exit 4 for a safety rule's ``stop`` (saying why), 5 for a run with problems, else 0."""
    for problem in summary.problems:
        error(problem)
    if summary.safety_stop:
        error(f"safety stop ({summary.stopped_by}) at tick {summary.ticks - 1}: {summary.stop_detail}")
        raise typer.Exit(ExitCode.SAFETY_STOP)
    if summary.problems:
        raise typer.Exit(ExitCode.INCOMPLETE)


def _exit_if_failed(summary: RunResult) -> None:
    """A run that did not finish: its error as the red line, exit 2 for bad input, else 1."""
    if not summary.ok:
        error(summary.error)
        if summary.safety_stop:       # a tick stall: systemd must not restart into it
            raise typer.Exit(ExitCode.SAFETY_STOP)
        raise typer.Exit(ExitCode.BAD_INPUT if summary.config_error else ExitCode.ERROR)


def _check_recording_path(record: Path) -> None:
    """The recording's directory exists and takes a new file (read-only mounts and permissions included):
    checked before anything starts, so a run never warms up to fail on its recording."""
    import tempfile
    check_output_path(record, "--record")
    if record.exists():
        raise BadInputError(f"--record {record} exists; recordings are never overwritten")
    try:
        fd, probe = tempfile.mkstemp(dir=record.resolve().parent, prefix=".hil-write-test-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise BadInputError(f"--record {record}: cannot write in {record.resolve().parent}: "
                            f"{exc.strerror or exc}") from None


def _clear_port_file(port_file: Optional[Path]) -> None:
    """Check where ``--port-file`` goes and remove an earlier run's file, so that a controller waiting
    for the file never reads stale ports (it appears once the loop is about to start)."""
    if port_file is not None:
        check_output_path(port_file, "--port-file")
        port_file.unlink(missing_ok=True)


VIEW_HELP = ("Serve the live view on this TCP port: a web page with the arm drawn from the model, the GH force in "
             "the glenoid, angles, stimulation, loop timing and alarms (README \"Live view\"); off by default.")
VIEW_HOST_HELP = "Address the live view listens on (127.0.0.1: this computer only)."


def _default_recording(cfg) -> Path:
    """``<recording.directory>/run-<UTC time>-<pid>.hilrec``, the recording of a run not given ``--record`` (the
    process id keeps two runs started in the same second apart); the directory is created."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    record = Path(cfg.recording.directory) / f"run-{stamp}-{os.getpid()}.hilrec"
    record.parent.mkdir(parents=True, exist_ok=True)
    return record


def _view_options(port: Optional[int], host: str):
    """``--view``/``--view-host`` as the run's live view (:class:`hil.view.host.ViewHost`; None: no view)."""
    from hil.view.host import ViewHost, ViewOptions
    return None if port is None else ViewHost(ViewOptions(check_port("--view", port), host))


def _run_metrics_port(port: Optional[int], metrics_enabled: bool, offline: bool):
    """``hil run --metrics-port``: exactly that port (0: any free one); None: the config's port if free, else any."""
    from hil.telemetry.metrics_port import MetricsPort
    if port is None:
        return None
    if offline or not metrics_enabled:
        raise BadInputError("--metrics-port: this run exports no metrics (" +
                            ("--offline)" if offline else "[metrics] enabled = false)"))
    return MetricsPort(check_port("--metrics-port", port, any_free=True), fixed=True, advice="stop that process, or choose another --metrics-port (0: any free "
                                                "port)")


def _serve_metrics_port(cfg, config: Path):
    """``hil serve`` listens on exactly ``[metrics] port``: Prometheus's static target for the bench."""
    from hil.telemetry.metrics_port import MetricsPort
    return MetricsPort(cfg.metrics.port, fixed=True,
                       advice=f"stop that process (a second hil serve or hil run?), or set another [metrics] port "
                              f"in {config} and in the Prometheus config that scrapes this service")


def check_config(
    config: Annotated[Path, typer.Argument(help="Service/experiment config (TOML).")],
    show: Annotated[bool, typer.Option("--show", help="Print the effective config (includes merged) as TOML on "
                                                      "stdout; the OK line goes to stderr.")] = False,
) -> None:
    """Validate a service config: every error names the file, the key and the reason."""
    with user_errors():
        from hil.config import load_service_config
        from hil.service.build import build_tick_engine, parse_drivers

        cfg = load_service_config(config)
        model, engine = build_tick_engine(cfg)
        parse_drivers(cfg, model, engine)          # validated, not opened: no bus, port or process
    if show:     # the merged document that runs record; tomllib reads it back unchanged
        import tomli_w
        sys.stdout.write(f"# effective config of {str(config)!r} (includes merged; relative file names are "
                         f"relative to {str(config.resolve().parent)!r})\n" + tomli_w.dumps(cfg.raw))
    (err_console() if show else out_console()).print(
        f"[green]{config}: OK[/green] — period {cfg.loop.period_s * 1e3:g} ms x "
        f"{cfg.loop.substeps} sub-steps, {engine.n_channels or 'direct'} "
        f"{'channels' if engine.n_channels else 'excitation mode'}, "
        f"{len(cfg.drivers)} driver(s): {', '.join(d['type'] for d in cfg.drivers) or 'none'}", soft_wrap=True)
    for line in electrode_lines(engine):
        (err_console() if show else out_console()).print(line, soft_wrap=True, markup=False)


def electrode_lines(engine) -> list[str]:
    """check-config's lines on the electrodes: each channel's spill-over and the session's threshold draw."""
    stim = engine.stim
    if stim is None:
        return []
    lines = [f"  {ch.name} spills to {', '.join(f'{k} {v:g}' for k, v in ch.spill.items())} from "
             f"{ch.spill_charge_c * 1e6:.3g} uC" for ch in stim.channels if ch.spill]
    session = stim.config.session_header()
    if session is not None:
        lines.append(f"  session seed {session['seed']}, threshold CV {session['threshold_cv']:g}: thresholds x " +
                     ", ".join(f"{k} {v:.3f}" for k, v in session["threshold_factors"].items()))
    return lines


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
    plant: Annotated[Optional[str], typer.Option(
        help="Override [plant] type: das3 (the full model) or mtg (the reduced muscle-torque-generator arm; its "
             "stimulation map must name MTGs, e.g. configs/stimulation-mtg.toml).")] = None,
    patient: Annotated[Optional[str], typer.Option(
        help="The virtual patient: a preset (able-bodied, c5-tetraplegia, c6-tetraplegia, stroke-hemiparesis; "
             "configs/patients/) or a patient file; replaces the config's [patient] table.")] = None,
    offline: Annotated[bool, typer.Option("--offline", help="Run the same ticks without the clock, as fast as the "
                                                            "CPU allows, in this process (loopback controllers "
                                                            "only; needs --duration); records as usual.")] = False,
    view: Annotated[Optional[int], typer.Option(help=VIEW_HELP)] = None,
    view_host: Annotated[str, typer.Option(help=VIEW_HOST_HELP)] = "127.0.0.1",
    metrics_port: Annotated[Optional[int], typer.Option(
        help="Serve /metrics on exactly this TCP port (0: any free port); the run fails if it is taken. Without "
             "it: the config's metrics port if free, else any free port (announced on stderr, in --port-file "
             "and in the Prometheus target file).")] = None,
) -> None:
    """Run a real-time experiment: the loop runs in its own process, this one shows progress.

    Exit status: 0 done, 1 error, 2 bad config, 4 stopped by a safety 'stop' action."""
    from hil.service import build as service
    with user_errors():
        from hil.config import ConfigOverrides, load_service_config
        from hil.patients import patient_override

        overrides = ConfigOverrides(plant, patient_override(patient))
        cfg = overrides.apply(load_service_config(config))
        if duration is not None:
            check_duration(duration)
        elif offline:
            raise BadInputError("--offline needs --duration")
        if offline and view is not None:
            raise BadInputError("--view shows a real-time run; replay an offline run's recording with hil view")
        view_options = _view_options(view, view_host)
        port_choice = _run_metrics_port(metrics_port, cfg.metrics.enabled, offline)
        if record is None and cfg.recording.enabled:
            record = _default_recording(cfg)
        if record is not None:
            _check_recording_path(record)
        _clear_port_file(port_file)
        if offline:
            _run_offline(cfg, config, duration, record, json_out, make_report)
            return
    from hil.service.supervisor import supervise

    err = err_console()
    total = None if duration is None else service.ticks_for(duration, cfg.loop.period_s)
    progress = Progress(TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(),
                        TextColumn("{task.fields[info]}"), console=err, disable=not err.is_terminal,
                        auto_refresh=False)
    task = progress.add_task("warming up", total=total, info="")
    compiling = progress.add_task("compiling numba kernels", total=None, visible=False, info="")
    next_draw = [0.0]

    def on_poll(status) -> None:
        now = time.monotonic()
        if now < next_draw[0]:
            return
        next_draw[0] = now + 0.1
        if status.state >= service.STATE_RUNNING:
            progress.update(compiling, visible=False)
            progress.update(task, description="running", completed=status.ticks,
                            info=f"elbow {status.elbow_deg:.1f} deg" + _gh_text(status.gh_stability))
        elif status.kernels_total:
            done, of = int(status.kernels_compiled), int(status.kernels_total)
            progress.update(compiling, visible=True, total=of, completed=done,
                            info=f"{done}/{of} (the first run after an install or an update)")
        progress.refresh()

    with progress:
        summary = supervise(str(config), duration, record, on_poll=on_poll, port_file=port_file, overrides=overrides,
                            view=view_options, metrics_port=port_choice)
    if json_out and summary.stalls:      # a stalled run's summary says how long it stalled
        print_json(summary.to_dict())
    _exit_if_failed(summary)
    if json_out:
        print_json(summary.to_dict())
    else:
        _print_run_summary(config, cfg.loop.period_s, summary)
        for w in summary.realtime["warnings"]:
            err.print(Text(f"warning: {w}", style="yellow"))
    if make_report and summary.recording:
        report(Path(summary.recording), out=None, json_out=False)
    _run_exit(summary)


def _gh_text(gh_stability: float) -> str:
    """The progress line's GH stability, left out where the plant does not model it (NaN)."""
    return f"  GH {gh_stability:+.2f}" if math.isfinite(gh_stability) else ""


def _run_offline(cfg, config: Path, duration: float, record: Optional[Path], json_out: bool, make_report: bool) -> None:
    """``hil run --offline``: :func:`hil.rt.offline.run_offline` with the recording; prints the throughput."""
    from hil.rt.offline import run_offline
    from hil.safety.table import safety_stop_reasons
    from hil.service import build as service
    from hil.service.warmup_progress import reporting_compilation

    n_ticks = service.ticks_for(duration, cfg.loop.period_s)
    with reporting_compilation(cfg.plant.type, bar_on_terminal=False):
        result = run_offline(cfg, n_ticks, record_path=None if record is None else str(record))
    simulated = result.ticks * cfg.loop.period_s
    doc = {"offline": True, "ticks": result.ticks, "simulated_s": simulated, "wall_s": round(result.wall_s, 6),
           "realtime_factor": simulated / result.wall_s if result.wall_s > 0 else None,
           "stopped_by": result.stopped_by, "stop_detail": result.stop_detail,
           "final_elbow_deg": result.final_elbow_deg, "recording": None if record is None else str(record)}
    if json_out:
        print_json(doc)
    else:
        table = key_value_table(f"hil run --offline {config}")
        table.add_row("ticks", f"{result.ticks} x {cfg.loop.period_s * 1e3:g} ms = {simulated:g} s simulated "
                               f"(stopped by {result.stopped_by})")
        table.add_row("wall time", f"{result.wall_s:.3f} s: {doc['realtime_factor']:.1f}x real time")
        table.add_row("final elbow flexion", f"{result.final_elbow_deg:.1f} deg")
        table.add_row("recording", str(record) if record else "off")
        out_console().print(table)
    if make_report and record is not None:
        report(record, out=None, json_out=False)
    if result.stopped_by in safety_stop_reasons():
        error(f"safety stop ({result.stopped_by}) at tick {result.ticks - 1}: {result.stop_detail}")
        raise typer.Exit(ExitCode.SAFETY_STOP)


def _print_run_summary(config: Path, period_s: float, summary: RunResult) -> None:
    from hil.safety.table import counted_rules
    table = key_value_table(f"hil run {config}")
    lat = summary.lateness_us
    table.add_row("ticks", f"{summary.ticks} x {period_s * 1e3:g} ms (stopped by "
                           f"{summary.stopped_by})")
    if lat:
        table.add_row("lateness (us)", f"p50 {lat['p50']:.1f}  p99 {lat['p99']:.1f}  p99.9 "
                                       f"{lat['p99.9']:.1f}  max {lat['max']:.1f}")
    comp = summary.compute_us
    if comp:
        table.add_row("compute (us)", f"p50 {comp['p50']:.1f}  p99 {comp['p99']:.1f}  p99.9 "
                                      f"{comp['p99.9']:.1f}  max {comp['max']:.1f}")
    table.add_row("deadline misses", str(summary.deadline_misses))
    rt = summary.realtime
    table.add_row("real-time", f"SCHED_FIFO {'yes' if rt['sched_fifo'] else 'no'}, mlock "
                               f"{'yes' if rt['mlock'] else 'no'}")
    table.add_row("safety", ", ".join(f"{r.count_label} {getattr(summary, r.count_field)}" for r in counted_rules()))
    table.add_row("commands", f"{summary.commands_received} accepted, rejected "
                              f"{summary.commands_rejected or 'none'}, clamped "
                              f"{summary.commands_clamped or 'none'}")
    table.add_row("final elbow flexion", f"{summary.final_elbow_deg:.1f} deg")
    if summary.recording:
        unwritten = sum(summary.records_unwritten.values())
        table.add_row("recording", f"{summary.recording} ({'complete' if not unwritten else 'INCOMPLETE: '}"
                                   f"{summary.records_unwritten if unwritten else ''})")
    if summary.drivers_lost:
        table.add_row("drivers lost", ", ".join(summary.drivers_lost))
    out_console().print(table)


def serve(
    config: Annotated[Path, typer.Option(help="Service config (TOML).")],
    port_file: Annotated[Optional[Path], typer.Option(
        help="Write the ports controllers connect to (JSON) to this file once the loop is about to start; an "
             "existing file is removed first.")] = None,
    view: Annotated[Optional[int], typer.Option(help=VIEW_HELP)] = None,
    view_host: Annotated[str, typer.Option(help=VIEW_HOST_HELP)] = "127.0.0.1",
) -> None:
    """Service mode (systemd Type=notify): run until SIGTERM; READY=1 once the loop runs, WATCHDOG=1
    while its ticks advance, STOPPING=1 on SIGTERM; the recording is closed before exiting."""
    from hil.service.supervisor import supervise

    with user_errors():
        from hil.config import load_service_config

        cfg = load_service_config(config)
        record = None
        if cfg.recording.enabled:
            record = _default_recording(cfg)
            _check_recording_path(record)
        _clear_port_file(port_file)
        view_options = _view_options(view, view_host)
    summary = supervise(str(config), None, record, notify=True, port_file=port_file, view=view_options,
                        metrics_port=_serve_metrics_port(cfg, config))
    _exit_if_failed(summary)
    err_console().print(f"hil serve: stopped by {summary.stopped_by} after {summary.ticks} ticks"
                        + (f"; recording {summary.recording}" if summary.recording else ""))
    _run_exit(summary)
