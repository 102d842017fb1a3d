"""What every command module shares: consoles, error output, exit codes and option checks.

Errors caused by the user's input (:class:`sim.errors.UserInputError`: files, options, configuration)
print one red line on stderr and exit with code 2; a diverged plant exits with code 3. Neither prints a
traceback: :func:`user_errors` turns them into the line and the code.
"""
from __future__ import annotations

import contextlib
import json
import math
import sys
from enum import IntEnum
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.text import Text

from sim.das3.config import ModelConfig, load_model_config
from sim.errors import UserInputError

SCHEME_HELP = ("Integration scheme: 'activation' (default; eq. 8 with implicit activation and fibre "
               "correction, robust to abrupt excitation) or 'paper' (eq. 8 exactly).")


class ExitCode(IntEnum):
    """The exit status of every ``hil`` command (README "Command line"; the systemd unit's
    ``RestartPreventExitStatus`` relies on BAD_INPUT and SAFETY_STOP)."""

    OK = 0
    ERROR = 1          # a failed run or benchmark, a replay that differs
    BAD_INPUT = 2      # a UserInputError (file, option, configuration) or an OSError on a named file
    DIVERGED = 3       # the plant diverged
    SAFETY_STOP = 4    # a GH or ROM ``stop`` action ended the run
    INCOMPLETE = 5     # a run with problems: a lost driver, an incomplete recording


class BadInputError(UserInputError, ValueError):
    """An option value that cannot be used."""


def out_console() -> Console:
    return Console()


def err_console() -> Console:
    return Console(stderr=True)


def error(message: str) -> None:
    """One red ``Error:`` line on stderr."""
    err_console().print(Text(f"Error: {message}", style="bold red"), soft_wrap=True)


def warn(message: str) -> None:
    """One yellow ``warning:`` line on stderr."""
    err_console().print(Text(f"warning: {message}", style="yellow"))


def exit_code(exc: BaseException) -> ExitCode | None:
    """Exit code for an error caused by the input or the plant, None for anything else (a bug)."""
    plant = sys.modules.get("sim.das3.plant")     # a PlantDivergedError exists only once sim.das3.plant is imported
    if plant is not None and isinstance(exc, plant.PlantDivergedError):
        return ExitCode.DIVERGED
    return ExitCode.BAD_INPUT if isinstance(exc, (UserInputError, OSError)) else None


def describe(exc: BaseException) -> str:
    """The error's red line: the file and the system's reason for an OSError, else its message."""
    if isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
        return f"{exc.filename}: {exc.strerror}"
    return str(exc) or type(exc).__name__


@contextlib.contextmanager
def user_errors():
    """Turn input and divergence errors into a red message and an exit code."""
    try:
        yield
    except typer.Exit:
        raise
    except Exception as exc:
        code = exit_code(exc)
        if code is None:
            raise
        error(describe(exc))
        raise typer.Exit(code) from None


def positive(option: str, value: float) -> float:
    if not (math.isfinite(value) and value > 0.0):
        raise BadInputError(f"{option} must be a finite number > 0, not {value!r}")
    return value


def count(option: str, value: int, low: int, high: int) -> int:
    """A whole-number option within [low, high] (the upper bounds: where a larger count is a typo, not a plan)."""
    if not low <= value <= high:
        raise BadInputError(f"{option} must be a whole number from {low} to {high}, not {value}")
    return value


def check_duration(value: float) -> float:
    """A run's --duration: > 0 and at most MAX_RUN_DURATION_S (30 days; see hil.config)."""
    from hil.config import MAX_RUN_DURATION_S
    if not (math.isfinite(value) and 0.0 < value <= MAX_RUN_DURATION_S):
        raise BadInputError(f"--duration must be a number in (0, {MAX_RUN_DURATION_S:g}] s (30 days), not {value!r}")
    return value


def check_port(option: str, value: int, any_free: bool = False) -> int:
    """A TCP port to listen on: 1..65535, or 0 (any free port) where ``any_free``."""
    if not (0 if any_free else 1) <= value <= 65535:
        raise BadInputError(f"{option} must be a TCP port, 1..65535{', or 0 for any free port' if any_free else ''}, "
                            f"not {value!r}")
    return value


def load_model_options(path: Optional[Path]) -> ModelConfig:
    """``--model-config``: the file's model options, or the published values without one."""
    return ModelConfig() if path is None else load_model_config(path)


def check_output_path(path: Path, option: str, inputs: tuple = ()) -> None:
    """An output file can be created: its directory exists, it is not a directory itself, and it is none of the
    command's ``inputs`` (paths, or None), which writing it would destroy."""
    parent = path.resolve().parent
    if not parent.is_dir():
        raise BadInputError(f"{option} {path}: directory {parent} does not exist")
    if path.is_dir():
        raise BadInputError(f"{option} {path} is a directory")
    for given in inputs:
        if given is not None and same_file(path, Path(given)):
            raise BadInputError(f"{option} {path} is this command's input {given}; writing it would destroy it")


def check_output_dir(path: Path, option: str) -> None:
    """An output directory can be used: it is a directory or does not exist yet (it is created, with its parents)."""
    if path.exists() and not path.is_dir():
        raise BadInputError(f"{option} {path} is a file, not a directory")


def check_output_paths(outputs: dict, inputs: tuple = ()) -> None:
    """:func:`check_output_path` for each given output (option -> path or None), and no two of them one file."""
    given = [(option, Path(path)) for option, path in outputs.items() if path is not None]
    for k, (option, path) in enumerate(given):
        check_output_path(path, option, inputs)
        for other, other_path in given[:k]:
            if same_file(path, other_path):
                raise BadInputError(f"{other} and {option} are one file, {path}; give each output its own")


def same_file(a: Path, b: Path) -> bool:
    """Whether two paths name one file (through links; by their resolved paths where one does not exist)."""
    try:
        return a.samefile(b)
    except OSError:
        return a.resolve() == b.resolve()


def key_value_table(title: str):
    """A two-column summary table (bold names, values) as every command prints its result."""
    from rich.table import Table
    table = Table(title=title, show_header=False)
    table.add_column(style="bold")
    table.add_column()
    return table


def print_json(doc) -> None:
    sys.stdout.write(json.dumps(doc, indent=2) + "\n")
