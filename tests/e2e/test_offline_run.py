"""`hil run --offline`: the same ticks without the clock, recorded as usual; an offline and a real-time run of the
same config give the same recording, bit for bit, in everything that does not measure wall-clock time."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from helpers import hil as _hil
from numpy.lib.recfunctions import repack_fields

from drivers.core.contract import STATUS_OVERRUN
from hil.recording.hilrec import RecordingReader

ROOT = Path(__file__).resolve().parents[2]
TIMING = ("deadline_ns", "start_ns", "lateness_ns", "compute_ns", "tick_ns", "skipped_deadlines")


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


def test_an_offline_recording_holds_every_record_and_command_the_listeners_saw(tmp_path):
    """The offline recorder copies each tick record and command-log entry into its blocks byte for byte, the
    commands into a buffer that grows (the playback schedule sends a command per excited muscle element,
    more than a block's ticks): the file holds exactly what the run's listeners saw, in order."""
    from hil.config import load_service_config
    from hil.rt.offline import BATCH_TICKS, run_offline
    seen_ticks, seen_commands = [], []

    class Collect:
        def on_tick(self, record, engine, actuation_ns):
            seen_ticks.append(record.copy())
            seen_commands.append(engine.log[:engine.n_log].copy())
    path = tmp_path / "off.hilrec"
    result = run_offline(load_service_config(ROOT / "configs" / "loopback.toml"), 2 * BATCH_TICKS + 50, [Collect()],
                         str(path))
    reader = RecordingReader(str(path))
    ticks, commands = reader.read("ticks"), reader.read("commands")
    assert result.ticks == len(ticks) == 2 * BATCH_TICKS + 50 and not reader.warnings
    assert ticks.tobytes() == np.concatenate(seen_ticks).tobytes()
    assert commands.tobytes() == np.concatenate(seen_commands).tobytes()
    assert np.count_nonzero(commands["tick"] < BATCH_TICKS) > BATCH_TICKS       # the first block's buffer grew


def test_bench_offline_times_each_run_and_keeps_no_recording(tmp_path):
    """`hil bench offline`: one real-time factor per run (its simulated over its wall time), the median and
    best of them, each run recorded to a temporary file that is gone afterwards."""
    out = subprocess.run([sys.executable, "-m", "hil", "bench", "offline", "--runs", "3", "--duration", "0.2",
                          "--json"], capture_output=True, text=True, cwd=ROOT, timeout=300,
                         env={**os.environ, "TMPDIR": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    factors, walls = doc["realtime_factors"], doc["wall_s"]
    assert len(factors) == len(walls) == 3 and doc["simulated_s"] == 0.2 and doc["recording"] is True
    assert factors == [0.2 / w for w in walls] and all(f > 0 for f in factors)
    assert doc["median_factor"] == sorted(factors)[1] and doc["best_factor"] == max(factors)
    assert list(tmp_path.iterdir()) == []


def test_bench_offline_refuses_a_run_that_stops_early(config_over):
    """A safety stop ends a run before its duration: its throughput is not the config's, so no figure."""
    cfg = config_over("elbow-hold.toml", """
        [safety]
        rom_margin_deg = 0.0
        rom_action = "stop"
        """)
    out = _hil("bench", "offline", "--config", str(cfg), "--runs", "1", "--duration", "1")
    assert out.returncode == 2, out.stdout + out.stderr
    assert "stopped early (range_of_motion" in out.stderr
