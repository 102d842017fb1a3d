"""The ``hil`` command line: offline simulation, real-time runs, recordings, model inspection, benchmarks.

One module per command group (typer's multi-file layout), assembled here into :data:`app`:
:mod:`.simulate`, :mod:`.run` (check-config, run, serve), :mod:`.recordings` (export, report, replay, view),
:mod:`.model`, :mod:`.can`, :mod:`.analyze`, :mod:`.fit`, :mod:`.sweep` and :mod:`.bench` (its tables in
:mod:`.bench_tables`); :mod:`.common` holds the consoles, exit codes and option checks they share. Only command-line logic lives here; the numerics are in ``sim``, the service in
``hil``, the benchmarks in ``hil.bench``.
"""
from __future__ import annotations

from typing import Annotated

import typer

from hil import __version__
from hil.cli import analyze, bench, can, fit, model, recordings, run, simulate, sweep

# rich_markup_mode=None: help texts name TOML tables in brackets ("[grid]"), which markup takes for tags
app = typer.Typer(name="hil", no_args_is_help=True, add_completion=False, rich_markup_mode=None,
                  pretty_exceptions_show_locals=False,
                  help="FES hardware-in-the-loop testbed with the DAS3 shoulder/arm model as plant.")


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


app.command()(simulate.simulate)
app.command("check-config")(run.check_config)
app.command()(run.run)
app.command()(run.serve)
app.command()(recordings.export)
app.command()(recordings.report)
app.command()(recordings.replay)
app.command()(recordings.view)
app.command()(sweep.sweep)
app.add_typer(model.app, name="model")
app.add_typer(bench.app, name="bench")
app.add_typer(can.app, name="can")
app.add_typer(analyze.app, name="analyze")
app.add_typer(fit.app, name="fit")
