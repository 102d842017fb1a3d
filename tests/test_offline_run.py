"""`hil run --offline`: the same ticks without the clock, recorded as usual; an offline and a real-time run of the
same config give the same recording, bit for bit, in everything that does not measure wall-clock time."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
from numpy.lib.recfunctions import repack_fields

from drivers.contract import STATUS_OVERRUN
from hil.recording import RecordingReader

ROOT = Path(__file__).resolve().parents[1]
TIMING = ("deadline_ns", "start_ns", "lateness_ns", "compute_ns", "tick_ns", "skipped_deadlines")


def _hil(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hil", *args], capture_output=True, text=True, cwd=ROOT, timeout=300)


def _deterministic(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """The ticks without their timing fields and overrun bit, and the commands without receive times."""
    r = RecordingReader(str(path))
    ticks, commands = r.read("ticks"), r.read("commands")
    t = repack_fields(ticks[[n for n in ticks.dtype.names if n not in TIMING]])
    t["frame"]["status"] &= ~np.uint32(STATUS_OVERRUN)
    return t, repack_fields(commands[[n for n in commands.dtype.names if n != "receive_ns"]])


def test_offline_and_realtime_recordings_are_bit_identical(tmp_path):
    rt, off = tmp_path / "rt.hilrec", tmp_path / "off.hilrec"
    cfg = str(ROOT / "configs" / "elbow-hold-fatigue.toml")        # PID, stimulation map, fatigue state
    a = _hil("run", "--config", cfg, "--duration", "2", "--record", str(rt), "--json")
    b = _hil("run", "--config", cfg, "--duration", "2", "--record", str(off), "--offline", "--json")
    assert a.returncode == 0, a.stderr
    assert b.returncode == 0, b.stderr
    summary = json.loads(b.stdout)
    assert summary["ticks"] == 500 and summary["realtime_factor"] > 1.0
    (ta, ca), (tb, cb) = _deterministic(rt), _deterministic(off)
    assert len(ta) == len(tb) == 500 and len(ca) == len(cb) > 100
    assert ta.tobytes() == tb.tobytes() and ca.tobytes() == cb.tobytes()
    state_rt, state_off = (RecordingReader(str(p)).read("controller0") for p in (rt, off))   # the PID's integral
    assert len(state_rt) == 100 and state_rt.tobytes() == state_off.tobytes()
    assert RecordingReader(str(off)).header["offline"] is True
    replay = _hil("replay", str(off), "--json")
    assert replay.returncode == 0 and json.loads(replay.stdout)["identical"] is True


def test_offline_needs_a_duration_and_in_process_controllers(tmp_path):
    out = _hil("run", "--config", str(ROOT / "configs" / "elbow-hold.toml"), "--offline")
    assert out.returncode == 2 and "--offline needs --duration" in out.stderr
    out = _hil("run", "--config", str(ROOT / "configs" / "can.toml"), "--offline", "--duration", "1")
    assert out.returncode == 2 and "loopback" in out.stderr and "driver" in out.stderr
