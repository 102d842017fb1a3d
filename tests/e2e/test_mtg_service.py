"""The reduced MTG arm as the service's plant ([plant] type = "mtg"): the loopback elbow hold, bit-identical
replay, and every transport unchanged (a CAN controller process, the unmodified RehaStim2 client)."""
from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import SensorFrames, hil_in_process, wait_for_port_file

from drivers.can.local_bus import host_local_group
from drivers.core.contract import STATUS_GH_UNSTABLE
from hil.config import load_service_config
from hil.rt.offline import run_offline

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"
DBC = CONFIGS / "fes-hil.dbc"
ELBOW = 9


def _mtg_config(tmp_path: Path, base: str, text: str = "", plant: str = 'type = "mtg"') -> Path:
    """A config over ``configs/<base>`` with the MTG plant (``plant``: the [plant] table's lines) and its
    one-channel-per-MTG map."""
    path = tmp_path / "mtg.toml"
    path.write_text(f'include = ["{CONFIGS / base}", "{CONFIGS / "stimulation-mtg.toml"}"]\n'
                    f'[plant]\n{plant}\n[metrics]\nenabled = false\n' + text)
    return path


def _hil_run(cfg: Path, tmp_path: Path, duration: float = 6.0, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "hil", "run", "--config", str(cfg), "--duration", str(duration),
                             "--json", "--record", str(tmp_path / "run.hilrec"), "--port-file",
                             str(tmp_path / "ports.json"), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)


def test_offline_elbow_hold_reaches_the_target():
    cfg = load_service_config(CONFIGS / "elbow-hold-mtg.toml")
    frames, status = [], []

    class Keep:
        def on_tick(self, record, engine, actuation_ns):
            frames.append(float(record[0]["frame"]["elbow_flexion"]))
            status.append(int(record[0]["frame"]["status"]))

    result = run_offline(cfg, 1500, [Keep()])
    elbow = np.degrees(frames)
    assert result.stopped_by == "duration" and result.ticks == 1500
    assert abs(np.mean(elbow[-250:]) - 90.0) < 3.0          # the last second within 3 deg of the set-point
    assert elbow[0] < 60.0
    assert not any(s & STATUS_GH_UNSTABLE for s in status)    # no GH model: never "unstable" (its value is NaN)


def test_hil_run_plant_option_records_and_replays_bit_identically(tmp_path):
    """`hil run --plant mtg` over a config that does not set the type; the recording keeps the override."""
    cfg = _mtg_config(tmp_path, "elbow-hold-mtg.toml", plant='type = "das3"')
    run = _hil_run(cfg, tmp_path, 3.0, "--plant", "mtg")
    out, err = run.communicate(timeout=180)
    assert run.returncode == 0, err
    summary = json.loads(out)
    assert summary["final_elbow_deg"] > 60.0
    replay = subprocess.run([sys.executable, "-m", "hil", "replay", str(tmp_path / "run.hilrec"), "--json"],
                            capture_output=True, text=True, cwd=ROOT, timeout=180)
    assert replay.returncode == 0, replay.stderr
    assert json.loads(replay.stdout)["identical"] is True


def test_a_can_controller_process_flexes_the_mtg_elbow_and_reads_no_gh_stability(tmp_path):
    group = host_local_group(random.randint(1, 0xFFFF))
    cfg = _mtg_config(tmp_path, "can.toml", f"""
[[driver]]
type = "can"
interface = "udp_multicast"
channel = "{group}"
dbc = "{DBC}"
""")
    hil = _hil_run(cfg, tmp_path)
    ctl = subprocess.run([sys.executable, str(ROOT / "examples" / "can_controller.py"), "--channel", group,
                          "--dbc", str(DBC), "--stim-channel", "7", "--amplitude-ma", "60", "--duration", "2.5"],
                         capture_output=True, text=True, timeout=120)
    out, err = hil.communicate(timeout=120)
    assert ctl.returncode == 0, ctl.stderr
    assert hil.returncode == 0, err
    peer, summary = json.loads(ctl.stdout), json.loads(out)
    assert summary["commands_received"] == peer["commands_sent"] > 50 and not summary["commands_rejected"]
    assert peer["elbow_last_deg"] > peer["elbow_first_deg"] + 30      # channel 7 is the elbow flexor MTG
    assert peer["gh_stability_last"] == "not_available"                # no GH model: no number a controller could use


def test_the_unmodified_rehastim2_client_flexes_the_mtg_elbow(tmp_path):
    cfg = _mtg_config(tmp_path, "serial.toml")
    hil = _hil_run(cfg, tmp_path)
    ports_file = tmp_path / "ports.json"
    stream = SensorFrames(wait_for_port_file(ports_file, hil)["0:sciencemode2"]["sensors"], hil)
    client = subprocess.run([sys.executable, str(ROOT / "examples" / "rehastim2_client.py"), "--port-file",
                             str(ports_file), "--channel", "7", "--amplitude", "60", "--hold", "1.0"],
                            capture_output=True, text=True, timeout=60)
    out, err = hil.communicate(timeout=60)
    stream.close()
    frames = stream.frames
    assert client.returncode == 0, client.stderr
    assert hil.returncode == 0, err
    elbow = np.degrees([float(f["elbow_flexion"]) for _, f in frames])
    assert len(elbow) > 1000 and elbow.max() > elbow[0] + 30
    assert all(math.isnan(float(f["gh_stability"])) for _, f in frames[:10])   # not modelled, said so


def test_the_progress_line_on_a_terminal_shows_the_elbow_and_no_gh_stability(tmp_path):
    """`hil run` draws its progress line where stderr is a terminal; the MTG arm has no GH stability to show (NaN),
    so the line leaves it out instead of printing "GH +nan"."""
    cfg = _mtg_config(tmp_path, "elbow-hold-mtg.toml")
    main, child = os.openpty()
    try:
        run = subprocess.Popen([sys.executable, "-m", "hil", "run", "--config", str(cfg), "--duration", "1.5"],
                               stdout=subprocess.PIPE, stderr=child, text=True, cwd=ROOT,
                               env={**os.environ, "COLUMNS": "160", "TERM": "xterm"})
        os.close(child)
        shown = read_terminal(main, run)
    finally:
        os.close(main)
    assert run.returncode == 0, shown
    assert "running" in shown and " deg" in shown and "elbow" in shown, shown
    assert "nan" not in shown.lower(), shown


def read_terminal(fd: int, proc: subprocess.Popen, timeout_s: float = 120.0) -> str:
    """Everything ``proc`` writes to the terminal ``fd`` until it ends (or ``timeout_s``)."""
    chunks, end = [], time.monotonic() + timeout_s
    while time.monotonic() < end:
        try:
            data = os.read(fd, 65536)
        except OSError:                      # EIO: every writer closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    proc.communicate(timeout=max(1.0, end - time.monotonic()))
    return b"".join(chunks).decode("utf-8", "replace")


@pytest.mark.parametrize("text, plant, key", [
    ('[safety]\ngh_action = "zero"\n', 'type = "mtg"', "safety.gh_action"),
    ("", 'type = "das3"\nmtg_parameters = "x.json"', "plant.mtg_parameters"),
    ("", 'type = "musculoskeletal"', "plant.type"),
])
def test_mtg_config_errors_name_the_key(tmp_path, text, plant, key):
    cfg = _mtg_config(tmp_path, "elbow-hold-mtg.toml", text, plant)
    out = hil_in_process("check-config", cfg)
    assert out.returncode == 2 and key in out.stderr, out.stderr


def test_a_corrupt_mtg_parameter_file_is_a_one_line_error(tmp_path):
    (tmp_path / "bad.json").write_text('{"format": "fes-hil mtg parameters", "mtgs": [{"name": "x"}]}')
    cfg = _mtg_config(tmp_path, "elbow-hold-mtg.toml", plant=f'type = "mtg"\nmtg_parameters = "{tmp_path / "bad.json"}"')
    out = subprocess.run([sys.executable, "-m", "hil", "run", "--config", str(cfg), "--duration", "0.5"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 2 and "bad.json" in out.stderr and "coordinate" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
