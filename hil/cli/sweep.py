"""``hil sweep``: a controller evaluated across many conditions, offline, on Dask workers."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from hil.cli.common import (
    ExitCode,
    count,
    err_console,
    error,
    key_value_table,
    out_console,
    print_json,
    user_errors,
    warn,
)


def sweep(
    sweep_file: Annotated[Path, typer.Argument(help="Sweep file (TOML): base config, [grid] and/or [random].")],
    out: Annotated[Path, typer.Option(help="Output directory: results.jsonl (streamed; a restart skips the runs "
                                          "in it), results.csv, runs/ (with keep_recordings).")],
    workers: Annotated[int, typer.Option(help="Local Dask workers (processes, one thread each; at most 256); 0: "
                                              "run in this process.")] = 2,
    scheduler: Annotated[Optional[str], typer.Option(help="An existing Dask scheduler, tcp://HOST:PORT "
                                                          "(instead of a local cluster).")] = None,
    report: Annotated[bool, typer.Option("--report", help="Then plot the results into DIR/report/: metrics vs "
                                                          "each swept key, heat maps over each pair of grid keys, "
                                                          "summary.json.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the sweep summary as JSON (with --report, the "
                                                          "report's summary under \"report\").")] = False,
) -> None:
    """Run every variant of a sweep offline and write one row of controller metrics per run (tracking error,
    settling time, overshoot, GH margin, safety, charge per channel); with --report, plot them."""
    from hil.sweep.runner import run_sweep
    from hil.sweep.spec import load_sweep
    from hil.sweep.worker import MAX_LOCAL_WORKERS

    with user_errors():
        count("--workers", workers, 0, MAX_LOCAL_WORKERS)
        spec = load_sweep(str(sweep_file))
        progress = Progress(TextColumn("sweep"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                            console=err_console(), disable=not err_console().is_terminal)
        task = progress.add_task("runs", total=None)

        def on_row(row, done, total):
            progress.update(task, completed=done, total=total)

        with progress:
            summary = run_sweep(spec, str(out), workers, scheduler, on_row)
        if report and summary["ok"]:                  # none ok: nothing to plot, the failure is reported
            from hil.sweep.report import sweep_report
            summary["report"] = sweep_report(spec, str(out))
    if json_out:
        print_json(summary)
    else:
        _print_summary(sweep_file, summary)
    _fail_or_warn(summary, str(sweep_file))


def _fail_or_warn(summary: dict, sweep_file: str) -> None:
    """No run succeeded: one error line, exit 2 (the input's fault) or 1; some failed: one warning line."""
    from hil.sweep.runner import failure

    reason = failure(summary, sweep_file)
    if reason is not None:
        error(reason)
        raise typer.Exit(ExitCode.BAD_INPUT if summary["input_errors"] else ExitCode.ERROR)
    if summary["errors"]:
        warn(f"{summary['errors']} of {summary['ok'] + summary['errors']} runs failed (reasons: column \"error\")")


def _print_summary(sweep_file: Path, summary: dict) -> None:
    """The summary table: runs, how they ended, wall time, where the results (and the report) are."""
    table = key_value_table(f"hil sweep {sweep_file}")
    table.add_row("runs", f"{summary['runs']} ({summary['run_now']} run now, {summary['skipped']} already done)")
    table.add_row("outcome", f"{summary['ok']} ok, {summary['errors']} error(s)")
    table.add_row("wall time", f"{summary['wall_s']:.1f} s on {summary['workers'] or 'this process'}"
                               f"{' worker(s) of ' + summary['scheduler'] if summary['scheduler'] else ''}")
    table.add_row("results", f"{summary['results_csv']} (and {summary['results_jsonl']})")
    if "report" in summary:
        _report_rows(table, summary["report"])
    out_console().print(table)


def _report_rows(table, doc: dict) -> None:
    """The report's rows of the summary table: where the figures are, what was plotted."""
    rows = doc["rows"]
    table.add_row("report", f"{len(doc['figures'])} figure(s) and summary.json in {doc['report_dir']}")
    table.add_row("plotted", f"{rows['ok']} ok run(s); {rows['error']} error row(s) left out, "
                             f"{rows['not_run']} run(s) not run yet")
    fails = doc["failures"]
    by_preset = ", ".join(f"{p} {c['failed']}/{c['runs']}" for p, c in fails["by_preset"].items() if p)
    table.add_row("failures", f"{fails['failed']} of {fails['judged']} run(s) fail the \\[failure] criteria"
                              + (f" ({by_preset})" if by_preset else ""))
    if fails["failed"]:
        worst = fails["ranking"][0]
        table.add_row("worst", f"{worst.get('patient') or worst['id']}: {'; '.join(worst['failed'])}")
