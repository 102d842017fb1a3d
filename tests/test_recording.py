"""Recording format, recorder process, crash tolerance, bit-identical replay and CSV export."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from drivers.shm_ring import ShmRing
from hil.recording import RecordingError, RecordingReader, RecordingWriter

REPO = Path(__file__).resolve().parents[1]
DT = np.dtype([("a", "<i8"), ("b", "<f8", (2, 3)), ("c", [("x", "<f4"), ("y", "u1", (2,))])])


def sample(n):
    r = np.zeros(n, DT)
    r["a"] = np.arange(n)
    r["b"] = np.random.default_rng(1).random((n, 2, 3))
    return r


def test_round_trip_of_nested_dtypes_and_streams(tmp_path):
    p = tmp_path / "r.hilrec"
    r = sample(7)
    with RecordingWriter(p, {"k": [1, 2]}, {"s": DT, "t": np.dtype("<i4")}) as w:
        w.append("s", r[:3])
        w.append("t", np.arange(4, dtype="<i4"))
        w.append("s", r[3:])
    rd = RecordingReader(p)
    assert rd.header["k"] == [1, 2] and rd.read("s").tobytes() == r.tobytes()
    assert list(rd.read("t")) == [0, 1, 2, 3] and not rd.truncated and not rd.warnings
    with pytest.raises(RecordingError, match="exists|cannot write"):
        RecordingWriter(p, {}, {"s": DT})  # never overwrites


def test_a_block_is_written_as_the_format_says(tmp_path):
    """A block is b"BLK1", uint16 stream, uint32 count, the records' bytes and the CRC32 of stream, count and
    records, whatever the layout of the array handed over (here a strided one)."""
    import struct
    import zlib
    p = tmp_path / "r.hilrec"
    r = sample(6)
    with RecordingWriter(p, {}, {"s": DT, "t": np.dtype("<i4")}) as w:
        start = p.stat().st_size         # the header, written at once
        w.append("t", np.arange(5, dtype="<i4")[::2])
        w.append("s", r)

    def block(stream, count, payload):
        head = struct.pack("<4sHI", b"BLK1", stream, count)
        return head + payload + struct.pack("<I", zlib.crc32(payload, zlib.crc32(head[4:])))
    assert p.read_bytes()[start:] == block(1, 3, np.array([0, 2, 4], "<i4").tobytes()) + block(0, 6, r.tobytes())


def test_torn_tail_is_ignored_and_reported(tmp_path):
    p = tmp_path / "r.hilrec"
    with RecordingWriter(p, {}, {"s": DT}) as w:
        w.append("s", sample(3))
        w.append("s", sample(5))
    data = p.read_bytes()
    block = 4 + 2 + 4 + 5 * DT.itemsize + 4
    for cut in range(len(data) - block + 1, len(data)):
        q = tmp_path / f"c{cut}.hilrec"
        q.write_bytes(data[:cut])
        rd = RecordingReader(q)
        assert rd.truncated and len(rd.read("s")) == 3


def test_corruption_in_the_middle_stops_with_a_warning(tmp_path):
    p = tmp_path / "r.hilrec"
    with RecordingWriter(p, {}, {"s": DT}) as w:
        for _ in range(3):
            w.append("s", sample(2))
    data = bytearray(p.read_bytes())
    first_payload = data.index(b"BLK1") + 10
    data[first_payload] ^= 0xFF
    p.write_bytes(bytes(data))
    rd = RecordingReader(p)
    assert len(rd.read("s")) == 0 and any("CRC" in w for w in rd.warnings)


def test_not_a_recording(tmp_path):
    p = tmp_path / "x.hilrec"
    p.write_bytes(b"hello")
    with pytest.raises(RecordingError, match="not a fes-hil recording"):
        RecordingReader(p)


def test_ring_order_wraparound_and_overflow():
    ring = ShmRing.create(DT, 4)
    try:
        r = sample(10)
        assert all(ring.push(r[i:i + 1]) for i in range(3))
        assert ring.pop_available()["a"].tolist() == [0, 1, 2]
        assert all(ring.push(r[i:i + 1]) for i in range(3, 7))
        assert not ring.push(r[7:8]) and ring.dropped == 1
        got = ring.pop_available()
        assert got.tobytes() == r[3:7].tobytes()
    finally:
        ring.release()


def hil(*args, **kw):
    return subprocess.run([sys.executable, "-m", "hil", *map(str, args)], capture_output=True, text=True,
                          timeout=300, **kw)


def test_run_record_replay_export(tmp_path):
    rec = tmp_path / "run.hilrec"
    out = hil("run", "--config", REPO / "configs/elbow-hold.toml", "--duration", "1", "--record", rec, "--json")
    assert out.returncode == 0, out.stderr
    rd = RecordingReader(rec)
    ticks = rd.read("ticks")
    assert len(ticks) == 250 and not rd.truncated
    assert rd.header["model_data_sha256"] and rd.header["config"]["loop"]["period_ms"] == 4.0
    assert len(rd.read("commands")) > 0
    rep = hil("replay", rec, "--json")
    assert rep.returncode == 0 and json.loads(rep.stdout)["identical"], rep.stdout + rep.stderr
    csv = tmp_path / "run.csv"
    assert hil("export", rec, "--csv", csv).returncode == 0
    header = csv.read_text().splitlines()[0].split(",")
    assert header[:3] == ["tick", "time", "SCy"] and "gh_stability" in header and "u_bicl" in header
    assert header[header.index("gh_stability") + 1] == "status"
    assert "biceps_amp_ma" in header and len(csv.read_text().splitlines()) == 251


def test_thelen_variant_is_recorded_and_replayed_as_that_variant(tmp_path):
    """The [model] table travels in the recording's header: the replay rebuilds the Thelen 2003 plant
    (a DAS3 replay of the same inputs would differ at the first tick the muscles matter)."""
    cfg = tmp_path / "thelen.toml"
    cfg.write_text(f'include = ["{REPO / "configs/elbow-hold.toml"}"]\n[model]\nmuscle_model = "thelen2003"\n')
    rec = tmp_path / "run.hilrec"
    assert hil("run", "--config", cfg, "--duration", "0.5", "--record", rec).returncode == 0
    header = RecordingReader(rec).header
    assert header["config"]["model"]["muscle_model"] == "thelen2003"
    rep = hil("replay", rec, "--json")
    assert rep.returncode == 0 and json.loads(rep.stdout)["identical"], rep.stdout + rep.stderr
    info = hil("model", "info", "--model-config", REPO / "configs/model-thelen2003.toml", "--json")
    assert json.loads(info.stdout)["model_options"]["muscle_model"] == "thelen2003"


def test_a_recording_cut_anywhere_holds_every_command_of_the_ticks_it_holds(tmp_path):
    """The recorder writes each drain's commands before its ticks, so a file cut at any byte (SIGKILL,
    power loss) never has a tick without its commands, and what is left replays bit-identically."""
    rec = tmp_path / "run.hilrec"
    assert hil("run", "--config", REPO / "configs/elbow-hold.toml", "--duration", "1", "--record", rec).returncode == 0
    full = RecordingReader(rec)
    all_commands = full.read("commands")
    data = rec.read_bytes()
    cuts = range(len(data) - 1, len(data) // 2, -97)
    for cut in cuts:
        part = tmp_path / "cut.hilrec"
        part.write_bytes(data[:cut])
        rd = RecordingReader(part)
        ticks = rd.read("ticks")
        if len(ticks) == 0:
            continue
        last = int(ticks["tick"][-1])
        want = all_commands[all_commands["tick"] <= last]
        got = rd.read("commands")
        assert got[got["tick"] <= last].tobytes() == want.tobytes(), f"cut at {cut} of {len(data)} bytes"
    part.write_bytes(data[:len(data) - 60])
    rep = hil("replay", part)
    assert rep.returncode == 0 and "bit-identical" in rep.stdout, rep.stdout + rep.stderr
    assert "ends inside a block" in rep.stderr


def test_replay_detects_a_tampered_frame(tmp_path):
    rec = tmp_path / "run.hilrec"
    assert hil("run", "--config", REPO / "configs/elbow-hold.toml", "--duration", "0.3", "--record", rec).returncode == 0
    data = bytearray(rec.read_bytes())
    # flip the recorded elbow angle of one tick: the CRC then fails, so rewrite the block properly
    rd = RecordingReader(rec)
    ticks = rd.read("ticks").copy()
    ticks["frame"]["q"][40, 9] += 1e-9
    tampered = tmp_path / "tampered.hilrec"
    with RecordingWriter(tampered, rd.header, rd.streams) as w:
        w.append("ticks", ticks)
        w.append("commands", rd.read("commands"))
    rep = hil("replay", tampered, "--json")
    doc = json.loads(rep.stdout)
    assert rep.returncode == 1 and doc["first_tick"] == 40 and doc["field"] == "q"
    assert data  # original untouched


@pytest.mark.parametrize("how", ["sigterm_supervisor", "sigkill_realtime"])
def test_recording_survives_termination(tmp_path, how):
    rec = tmp_path / "run.hilrec"
    started = time.time()
    proc = subprocess.Popen([sys.executable, "-m", "hil", "run", "--config", str(REPO / "configs/elbow-hold.toml"),
                             "--record", str(rec)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (not rec.exists() or rec.stat().st_size < 200_000):
        time.sleep(0.2)
    assert rec.exists(), proc.stderr.read() if proc.poll() is not None else "no recording"
    if how == "sigterm_supervisor":
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        assert proc.returncode == 0
        rd = RecordingReader(rec)
        assert not rd.truncated and len(rd.read("ticks")) > 100
        rep = hil("replay", rec, "--json")
        assert json.loads(rep.stdout)["identical"]
    else:
        rt = subprocess.run(["pgrep", "-P", str(proc.pid), "-x", "hil-rt"], capture_output=True, text=True).stdout.split()
        assert len(rt) == 1, "no real-time process found"
        os.kill(int(rt[0]), signal.SIGKILL)
        proc.wait(60)
        time.sleep(1.0)  # the recorder drains and closes after noticing its parent died
        assert not any(p.name.startswith("psm_") and p.stat().st_mtime > started for p in Path("/dev/shm").iterdir()), \
            "the recorder left its rings behind"
        rd = RecordingReader(rec)
        n = len(rd.read("ticks"))
        assert n > 100
        assert np.array_equal(rd.read("ticks")["tick"], np.arange(n))  # complete up to the kill


def test_report_writes_pngs_and_a_summary(tmp_path):
    rec = tmp_path / "run.hilrec"
    assert hil("run", "--config", REPO / "configs/elbow-hold.toml", "--duration", "0.5", "--record", rec,
               "--report").returncode == 0
    out_dir = tmp_path / "run"
    for name in ("joint_angles.png", "glenoid.png", "lateness.png"):
        assert (out_dir / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((out_dir / "summary.json").read_text())["ticks"] == 125
    doc = json.loads(hil("report", rec, "--out", tmp_path / "r2", "--json").stdout)
    assert doc["ticks"] == 125 and doc["elbow_deg_range"][1] > doc["elbow_deg_range"][0]
    assert doc["gh_unstable_ticks"] == 0 and doc["files"]["summary"] == str(tmp_path / "r2" / "summary.json")
    assert doc["gh_zeroed_ticks"] == doc["rom_alarm_ticks"] == doc["rom_zeroed_ticks"] == 0   # within range


def test_report_of_a_recording_without_ticks_is_a_clear_error(tmp_path):
    rec = tmp_path / "run.hilrec"
    assert hil("run", "--config", REPO / "configs/elbow-hold.toml", "--duration", "0.1", "--record", rec).returncode == 0
    header = RecordingReader(rec)
    empty = tmp_path / "empty.hilrec"
    with RecordingWriter(empty, header.header, header.streams):
        pass
    out = hil("report", empty, "--out", tmp_path / "r")
    assert out.returncode == 2 and "no ticks recorded" in out.stderr and "Traceback" not in out.stderr


def test_port_file_checked_before_the_run_and_removed_after_it(tmp_path):
    """A controller waiting for --port-file must never read an earlier run's ports."""
    stale = tmp_path / "ports.json"
    stale.write_text('{"0:sciencemode2": {"stimulator": "/dev/pts/99"}}')
    rec = tmp_path / "run.hilrec"
    out = hil("run", "--config", REPO / "configs/elbow-hold.toml", "--duration", "0.2", "--record", rec,
              "--port-file", stale)
    assert out.returncode == 0, out.stderr
    assert not stale.exists()
    t0 = time.monotonic()
    out = hil("run", "--config", REPO / "configs/elbow-hold.toml", "--duration", "0.2", "--record",
              tmp_path / "run2.hilrec", "--port-file", tmp_path / "missing" / "ports.json")
    assert out.returncode == 2 and "--port-file" in out.stderr and "does not exist" in out.stderr
    assert not (tmp_path / "run2.hilrec").exists() and time.monotonic() - t0 < 60
