"""``hil export``, ``hil report``, ``hil replay`` and ``hil view``: what is done with a recording (.hilrec)
after a run.

A recording that cannot be read is a :class:`hil.recording.hilrec.RecordingError`, an input error (exit 2).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from hil.cli.common import (
    BadInputError,
    ExitCode,
    check_output_paths,
    check_port,
    err_console,
    key_value_table,
    out_console,
    print_json,
    user_errors,
    warn,
)


def export(
    run_file: Annotated[Path, typer.Argument(help="Recording (.hilrec).")],
    csv_out: Annotated[Optional[Path], typer.Option("--csv", help="Output CSV: one row per tick.")] = None,
    mot_out: Annotated[Optional[Path], typer.Option("--mot", help="Output OpenSim motion (.mot): time and the DAS3 "
                                                                 "model's coordinates SC_y ... PS_y.")] = None,
    sto_out: Annotated[Optional[Path], typer.Option("--sto", help="Output OpenSim storage (.sto): muscle "
                                                                 "excitations, activations, forces, GH reaction.")] = None,
    degrees: Annotated[bool, typer.Option("--degrees", help="Write the .mot angles in degrees (inDegrees=yes); "
                                                            "default radians (inDegrees=no).")] = False,
    muscle_states: Annotated[bool, typer.Option(help="Recompute activations and muscle forces for the .sto by a "
                                                     "bit-identical replay of the recording.")] = True,
) -> None:
    """Export a recording to CSV, each column named with its unit: tick, t_s, q_<dof>_rad for the 11 DOFs,
    gh_stability, status (bits: 1 watchdog, 2 GH unstable, 4 overrun, 8 ROM alarm, 16 GH zeroed, 32 stopping,
    64 ROM zeroed), u_<muscle> (excitation 0..1) per muscle element, and per stimulation channel its applied
    <channel>_pw_us, _amp_ma, _freq_hz. A controller plug-in's recorded state goes to
    <CSV stem>.controller<i>.csv (tick and its state() keys). --mot and --sto write OpenSim Storage files for
    the published DAS3 OpenSim model (docs/guides/opensim.md)."""
    with user_errors():
        from hil.recording.hilrec import export_csv, export_driver_streams, read_run_recording
        from hil.recording.opensim_files import export_mot, export_sto

        if csv_out is None and mot_out is None and sto_out is None:
            raise BadInputError("give at least one of --csv, --mot, --sto")
        check_output_paths({"--csv": csv_out, "--mot": mot_out, "--sto": sto_out}, inputs=(run_file,))
        reader = read_run_recording(str(run_file))
        written = {}
        if csv_out is not None:
            h = reader.header
            written[csv_out] = export_csv(reader, str(csv_out), h["muscle_names"], h["dof_names"], h["channel_names"])
            written.update(export_driver_streams(reader, str(csv_out)))
        if mot_out is not None:
            written[mot_out] = export_mot(reader, str(mot_out), degrees)
        if sto_out is not None:
            written[sto_out] = export_sto(reader, str(sto_out), muscle_states)
    for w in reader.warnings:
        warn(w)
    for path, rows in written.items():
        out_console().print(f"{path}: {rows} {'ticks' if path in (csv_out, mot_out, sto_out) else 'rows'}")


def _add_run_metrics(table: Table, m: dict) -> None:
    """Rows of the run's controller metrics (hil.reports.run_metrics): tracking, GH margin, delivered charge."""
    tr = m.get("tracking")
    if tr is not None:
        settle = "never (within 2 deg)" if tr["settling_time_s"] is None else f"{tr['settling_time_s']:.3f} s"
        table.add_row("tracking (target)", f"RMS error {math.degrees(tr['rms_error_rad']):.2f} deg, settling {settle}, "
                                           f"overshoot {math.degrees(tr['overshoot_rad']):.2f} deg, final error "
                                           f"{math.degrees(tr['final_error_rad']):+.2f} deg")
    if m["gh_min_margin"] is not None:
        table.add_row("GH margin", f"smallest {m['gh_min_margin']:+.3f} (> 0: inside the rim)")
    charged = {k: v for k, v in m["charge_uc"].items() if v > 0.0}
    if charged:
        table.add_row("charge (uC)", ", ".join(f"{k} {v:.0f}" for k, v in charged.items()))


def report(
    run_file: Annotated[Path, typer.Argument(help="Recording (.hilrec).")],
    out: Annotated[Optional[Path], typer.Option(
        help="Directory for the PNG files and summary.json (default: next to the recording, without .hilrec).")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """PNG plots (joint angles, GH force in the glenoid ellipse, tick lateness, fatigue) and a summary."""
    with user_errors():
        from hil.reports.run_report import make_report

        doc = make_report(str(run_file), str(out or run_file.with_suffix("")))
    if json_out:
        print_json(doc)
        return
    table = key_value_table(f"hil report {run_file}")
    table.add_row("ticks", f"{doc['ticks']} ({doc['duration_s']:.3f} s simulated)")
    table.add_row("lateness (us)", "p50 {p50:.1f}  p99 {p99:.1f}  max {max:.1f}".format(**doc["lateness_us"]))
    table.add_row("deadline misses", str(doc["deadline_misses"]))
    table.add_row("GH", "not modelled (reduced MTG arm)" if doc["gh_stability_max"] is None else
                  f"max stability {doc['gh_stability_max']:+.3f}, unstable ticks {doc['gh_unstable_ticks']}")
    table.add_row("watchdog ticks", str(doc["watchdog_ticks"]))
    table.add_row("safety ticks", f"GH zeroed {doc['gh_zeroed_ticks']}, ROM alarm {doc['rom_alarm_ticks']}, "
                                  f"ROM zeroed {doc['rom_zeroed_ticks']}")
    table.add_row("elbow flexion (deg)", "{:.1f} .. {:.1f}".format(*doc["elbow_deg_range"]))
    table.add_row("commands", str(doc["commands"]))
    for stall in doc["tick_stalls"]:
        table.add_row("TICK STALL", f"the loop stalled in tick {stall['tick']} for {stall['duration_s']:.1f} s: "
                                    "stimulation stopped, run ended")
    _add_run_metrics(table, doc["run_metrics"])
    for name, f in doc.get("fatigue", {}).items():
        table.add_row(f"fatigue {name}", f"fitness {f['fitness_end']:.3f} at the end (lowest {f['fitness_min']:.3f}); "
                                         f"amplitude {f['amplitude_first_5s_ma']:.1f} -> {f['amplitude_last_5s_ma']:.1f} mA "
                                         "(first / last 5 s)")
    for name, f in doc["files"].items():
        table.add_row(name, f)
    out_console().print(table)
    for w in doc["warnings"]:
        warn(w)


def replay(run_file: Annotated[Path, typer.Argument(help="Recording (.hilrec).")],
           json_out: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Re-run the plant offline on the recorded inputs; report bit-identical or the first difference."""
    with user_errors():
        from hil.recording.replay import replay_recording

        result = replay_recording(str(run_file))
    if json_out:
        print_json(result)
    else:
        if result["identical"]:
            out_console().print(f"[green]bit-identical[/green]: {result['ticks']} ticks replayed")
        else:
            out_console().print(f"[red]differs[/red] from tick {result['first_tick']}, field {result['field']!r} "
                                f"({result['ticks']} ticks compared); largest difference "
                                f"{result['max_difference']:.3g} (SI units) in {result['max_difference_field']!r}")
        for w in result["warnings"]:
            warn(w)
    if not result["identical"]:
        raise typer.Exit(ExitCode.ERROR)


def view(
    run_file: Annotated[Path, typer.Argument(help="Recording (.hilrec).")],
    port: Annotated[int, typer.Option(help="TCP port of the page.")] = 8090,
    host: Annotated[str, typer.Option(help="Address to listen on (127.0.0.1: this computer only).")] = "127.0.0.1",
) -> None:
    """Replay a recording in the live view's page (README "Live view"): play/pause, seek, speed 0.25x-4x,
    at most 50 samples per second of the run. Serves until Ctrl-C or SIGTERM."""
    with user_errors():
        from hil.view.server import serve_replay

        check_port("--port", port)
        serve_replay(str(run_file), host, port,
                     on_ready=lambda url: err_console().print(f"hil view: {run_file} at {url} (Ctrl-C ends)"))
