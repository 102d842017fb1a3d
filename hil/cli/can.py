"""``hil can``: the testbed's CAN message set (DBC), generated from the model and printed as a table."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from hil.cli.common import BadInputError, check_output_path, count, user_errors
from sim.output_file import write_output_text

PROJECT_DBC = Path(__file__).resolve().parents[2] / "configs" / "fes-hil.dbc"

app = typer.Typer(no_args_is_help=True, help="The CAN message set (DBC).")


@app.command("dbc")
def can_dbc(out: Annotated[Optional[Path], typer.Option(help="Write the DBC here (default: stdout).")] = None,
            channels: Annotated[int, typer.Option(help="Number of stimulation channels (1 to 16).")] = 8) -> None:
    """Generate the testbed's DBC from the model's DOF, muscle element and group names."""
    from drivers.can.dbc import generate_dbc
    from hil.rt.stimulation import MAX_CHANNELS
    from hil.service.build import muscle_groups
    from sim.das3.model import load_model

    with user_errors():
        count("--channels", channels, 1, MAX_CHANNELS)
        if out is not None:
            check_output_path(out, "--out")
        model = load_model()
        text = generate_dbc(model.dof_names, model.muscle_names, list(muscle_groups(model.muscle_names)), channels)
        if out is None:
            sys.stdout.write(text)
        else:
            write_output_text(out, text)


@app.command("table")
def can_table(dbc: Annotated[Path, typer.Option(help="DBC file (default: the project's configs/fes-hil.dbc).")]
              = PROJECT_DBC) -> None:
    """Print the message table of a DBC file as Markdown (the README's table)."""
    from drivers.can.dbc import message_table, read_dbc
    with user_errors():
        if not dbc.is_file():
            raise BadInputError(f"--dbc {dbc} not found")
        sys.stdout.write(message_table(read_dbc(dbc)))
