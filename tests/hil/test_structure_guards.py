"""Guards of the structure redesign (issue 13): what must not change when code moves. A recording made
before the move replays bit-identically after it with unchanged record layouts, and the ``hil`` command
tree (every command, option, default) stays as it was."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer.main

from drivers.core.contract import COMMAND_DTYPE
from hil.cli import app
from hil.config import service_config_from_dict
from hil.recording.hilrec import RecordingReader
from hil.recording.replay import replay_recording
from hil.rt.loop import tick_dtype
from hil.service.build import build_engine

DATA = Path(__file__).resolve().parents[1] / "data"
FIXTURE = DATA / "elbow-hold-v0.1.hilrec"      # hil run --config configs/elbow-hold.toml --duration 0.2 (v0.1)
FIXTURE_V02 = DATA / "elbow-hold-v0.2.hilrec"  # the same run with the plant arithmetic of issue 14 (chunked sums)
FIXTURE_V03 = DATA / "elbow-hold-v0.3.hilrec"  # the same run with analytic qdot derivatives, fused tendon stiffness
FIXTURE_V04 = DATA / "elbow-hold-v0.4.hilrec"  # the same run with the line-of-action sums in a CPU-independent order
FIXTURE_IMU = DATA / "elbow-hold-imu-v0.4.hilrec"  # --config configs/elbow-hold-imu.toml --offline --duration 0.2,
                                                   # its lab sensors measured in Python after the compiled tick
ROUNDING_LIMIT = 1e-9
"""Largest difference (SI units) of any frame field when an older recording is replayed by the faster kernels,
which sum the same terms in another order: rounding, far below any sensor's resolution."""
CLI_TREE = DATA / "cli-tree.json"


def test_fixture_recording_replays_bit_identically():
    result = replay_recording(str(FIXTURE_V04))
    assert result["identical"] and result["ticks"] == 50, result


def test_a_recording_with_lab_sensors_replays_bit_identically():
    """Made when the lab sensors (noisy IMUs, encoders, noisy EMG, fatigue) ran in Python after the compiled tick;
    they now run inside it: the same draws from the same generator in the same order, so the same bits (a sample
    taken at another tick, or a draw in another order, fails this)."""
    result = replay_recording(str(FIXTURE_IMU))
    assert result["identical"] and result["ticks"] == 50, result


@pytest.mark.parametrize("fixture", [FIXTURE, FIXTURE_V02, FIXTURE_V03], ids=["v0.1", "v0.2", "v0.3"])
def test_recording_of_the_previous_arithmetic_replays_within_rounding(fixture):
    result = replay_recording(str(fixture))
    assert not result["identical"] and result["ticks"] == 50 and result["max_difference"] < ROUNDING_LIMIT, result


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
    repo = str(Path(__file__).resolve().parents[2])
    params = [{"name": p.name, "opts": sorted(p.opts + p.secondary_opts), "required": p.required,
               "default": None if callable(p.default) else repr(p.default).replace(repo, "<repository>"),
               "flag": bool(getattr(p, "is_flag", False)), "kind": type(p).__name__}
              for p in command.params if p.name != "help"]
    tree = {prefix: params}
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        tree.update(command_tree(sub, f"{prefix} {name}"))
    return tree


def test_command_tree_is_unchanged():
    """Regenerate tests/data/cli-tree.json only for a deliberate change of the command line."""
    assert command_tree() == json.loads(CLI_TREE.read_text())


def test_every_command_is_run_by_some_test():
    """Each leaf of the command tree appears in a test as its words (``"bench", "mtg"`` or ``bench mtg``): a
    command no test runs can break unseen (``hil bench mtg`` once crashed on every call)."""
    tree = json.loads(CLI_TREE.read_text())
    leaves = [name.split()[1:] for name in tree if not any(other.startswith(name + " ") for other in tree)]
    sources = "\n".join(path.read_text() for path in DATA.parent.rglob("*.py"))
    untried = [" ".join(words) for words in leaves
               if ", ".join(f'"{w}"' for w in words) not in sources and " ".join(words) not in sources]
    assert len(leaves) > 30 and not untried, untried


def test_offline_run_gives_the_frames_of_a_real_time_run(tmp_path, config_over):
    """The same tick body without a clock: every frame of a real-time elbow-hold run, bit for bit (the
    overrun bit aside, which only a wall clock sets)."""
    import subprocess
    import sys

    import numpy as np

    from drivers.core.contract import STATUS_OVERRUN
    from hil.config import load_service_config
    from hil.rt.offline import run_offline

    root = Path(__file__).resolve().parents[2]
    cfg = config_over("elbow-hold.toml", """
        [metrics]
        enabled = false
        """)
    rec = tmp_path / "run.hilrec"
    out = subprocess.run([sys.executable, "-m", "hil", "run", "--config", str(cfg), "--duration", "0.5",
                          "--record", str(rec)], capture_output=True, text=True, timeout=300, cwd=root)
    assert out.returncode == 0, out.stderr
    recorded = RecordingReader(rec).read("ticks")["frame"].copy()
    frames = []

    class Collect:
        def on_tick(self, record, engine, actuation_ns):
            frames.append(record[0]["frame"].copy())
    result = run_offline(load_service_config(cfg), len(recorded), [Collect()])
    offline = np.array(frames)
    assert result.ticks == len(recorded) == 125 and result.stopped_by == "duration"
    recorded["status"] &= ~np.uint32(STATUS_OVERRUN)
    assert offline.tobytes() == recorded.tobytes()


def test_replay_and_check_config_of_a_socketcan_run_open_no_interface(tmp_path, config_over):
    """No vcan/can interface exists here: a CAN run recorded on SocketCAN still replays (the recorded
    commands are fed, no bus is opened) and its config still checks (parsed, not opened)."""
    import copy
    import subprocess
    import sys

    from hil.recording.hilrec import RecordingWriter

    reader = RecordingReader(FIXTURE_V04)
    header = copy.deepcopy(reader.header)
    header["config"]["driver"] = [{"type": "can", "interface": "socketcan", "channel": "can7",
                                   "dbc": str(Path(__file__).resolve().parents[2] / "configs" / "fes-hil.dbc")}]
    streams = {s["name"]: reader.streams[s["name"]] for s in header.pop("streams")}
    rec = tmp_path / "socketcan.hilrec"
    with RecordingWriter(str(rec), header, streams) as writer:
        writer.append("commands", reader.read("commands"))
        writer.append("ticks", reader.read("ticks"))
    result = replay_recording(str(rec))
    assert result["identical"] and result["ticks"] == 50, result
    cfg = config_over("can.toml", f"""
        [[driver]]
        type = "can"
        interface = "socketcan"
        channel = "can7"
        dbc = "{Path(__file__).resolve().parents[2] / 'configs' / 'fes-hil.dbc'}"
        """)
    out = subprocess.run([sys.executable, "-m", "hil", "check-config", str(cfg)], capture_output=True, text=True,
                         timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0 and "OK" in out.stdout + out.stderr, out.stderr
