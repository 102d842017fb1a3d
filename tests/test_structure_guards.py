"""Guards of the structure redesign (issue 13): what must not change when code moves. A recording made
before the move replays bit-identically after it with unchanged record layouts, and the ``hil`` command
tree (every command, option, default) stays as it was."""
from __future__ import annotations

import json
from pathlib import Path

import typer.main

from drivers.base import COMMAND_DTYPE
from hil.cli import app
from hil.config import service_config_from_dict
from hil.loop import tick_dtype
from hil.recording import RecordingReader
from hil.replay import replay_recording
from hil.service import build_engine

DATA = Path(__file__).resolve().parent / "data"
FIXTURE = DATA / "elbow-hold-v0.1.hilrec"      # hil run --config configs/elbow-hold.toml --duration 0.2 (v0.1)
CLI_TREE = DATA / "cli-tree.json"


def test_fixture_recording_replays_bit_identically():
    result = replay_recording(str(FIXTURE))
    assert result["identical"] and result["ticks"] == 50, result


def test_recording_layouts_are_unchanged():
    reader = RecordingReader(FIXTURE)
    cfg = service_config_from_dict(reader.header["config"], reader.header["config_path"])
    model, engine, drivers = build_engine(cfg)
    for d in drivers:
        d.shutdown()
    ticks = tick_dtype(engine.n_channels, model.n_muscles, engine.sensor.dtype)
    assert reader.streams["ticks"] == ticks and reader.streams["ticks"].descr == ticks.descr
    assert reader.streams["commands"] == COMMAND_DTYPE and reader.streams["commands"].descr == COMMAND_DTYPE.descr
    assert reader.read("ticks").shape == (50,) and reader.read("commands").shape[0] > 0


def command_tree(command=None, prefix: str = "hil") -> dict:
    """Every command path -> its parameters (names, flags, defaults, whether required), from click."""
    command = command or typer.main.get_command(app)
    params = [{"name": p.name, "opts": sorted(p.opts + p.secondary_opts), "required": p.required,
               "default": None if callable(p.default) else repr(p.default),
               "flag": bool(getattr(p, "is_flag", False)), "kind": type(p).__name__}
              for p in command.params if p.name != "help"]
    tree = {prefix: params}
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        tree.update(command_tree(sub, f"{prefix} {name}"))
    return tree


def test_command_tree_is_unchanged():
    """Regenerate tests/data/cli-tree.json only for a deliberate change of the command line."""
    assert command_tree() == json.loads(CLI_TREE.read_text())
