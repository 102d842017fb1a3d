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
from helpers import hil

from drivers.ipc.shm_ring import ShmRing
from hil.recording.hilrec import RecordingError, RecordingReader, RecordingWriter

REPO = Path(__file__).resolve().parents[2]
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
    header = csv.read_text().splitlines()[0].split(",")       # each column named with its unit
    assert header[:2] == ["tick", "t_s"] and header[2:13] == [f"q_{d}_rad" for d in rd.header["dof_names"]]
    assert header[13:15] == ["gh_stability", "status"] and "u_bicl" in header
    assert "biceps_amp_ma" in header and len(csv.read_text().splitlines()) == 251
    exported = np.genfromtxt(csv, delimiter=",", names=True)
    np.testing.assert_array_equal(exported["t_s"], ticks["frame"]["time"])
    np.testing.assert_array_equal(exported["q_ELx_rad"], ticks["frame"]["q"][:, 9])


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


def shm_segments_mapped_by(pid: int) -> set[str]:
    """The /dev/shm files process ``pid`` maps: this run's own segments, not those of other `hil` processes
    on the machine (CI runs the suite next to a `hil serve`)."""
    paths = set()
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and fields[5].startswith("/dev/shm/psm_"):
            paths.add(fields[5])
    return paths


@pytest.mark.parametrize("how", ["sigterm_supervisor", "sigkill_realtime"])
def test_recording_survives_termination(tmp_path, how):
    rec = tmp_path / "run.hilrec"
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
        segments = shm_segments_mapped_by(int(rt[0]))
        assert segments, "the real-time process maps no shared memory"
        os.kill(int(rt[0]), signal.SIGKILL)
        proc.wait(60)
        time.sleep(1.0)  # the recorder drains and closes after noticing its parent died
        assert not [s for s in segments if os.path.exists(s)], "the recorder left its rings behind"
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


# -- no recording hangs a command or exhausts its memory; its header is checked before use ----------------------

FIXTURE = REPO / "tests" / "data" / "elbow-hold-v0.4.hilrec"


def rewritten(tmp_path, change, name="bad.hilrec") -> Path:
    """The fixture recording with its header's JSON replaced by ``change(header)`` (a dict, or the raw bytes), a
    valid CRC and its blocks unchanged."""
    import struct

    from hil.recording.hilrec import MAGIC, encode_header
    data = FIXTURE.read_bytes()
    (n,) = struct.unpack_from("<I", data, len(MAGIC))
    new = change(json.loads(data[len(MAGIC) + 4: len(MAGIC) + 4 + n]))
    path = tmp_path / name
    path.write_bytes(encode_header(new if isinstance(new, bytes) else json.dumps(new).encode())
                     + data[len(MAGIC) + 8 + n:])
    return path


def _set(doc, key, value):
    doc[key] = value
    return doc


def _stream_descr(doc, stream, descr):
    next(s for s in doc["streams"] if s["name"] == stream)["descr"] = descr
    return doc


def _without_field(doc, stream, field):
    s = next(s for s in doc["streams"] if s["name"] == stream)
    s["descr"] = [f for f in s["descr"] if f[0] != field]
    return doc


BAD_HEADERS = {
    "a JSON list": (lambda d: b"[1, 2, 3]", "not an object"),
    "no streams": (lambda d: {k: v for k, v in d.items() if k != "streams"}, "'streams'"),
    "not UTF-8": (lambda d: b'{"streams": "caf\xe9"}', "not UTF-8"),
    "not JSON": (lambda d: b"{" * 100000, "not valid JSON"),
    "zero-size record": (lambda d: _stream_descr(d, "commands", []), "a record of 0 bytes"),
    "object records": (lambda d: _stream_descr(d, "commands", "|O"), "Python objects"),
    "bad record type": (lambda d: _stream_descr(d, "commands", "<q17"), "no valid record type"),
    "period 0": (lambda d: _set(d, "period_s", 0), "period_s"),
    "period text": (lambda d: _set(d, "period_s", "4 ms"), "period_s"),
    "names not strings": (lambda d: _set(d, "dof_names", [1, 2]), "dof_names"),
    "fewer muscles": (lambda d: _set(d, "muscle_names", d["muscle_names"][:3]), "field 'u'"),
    "no frame": (lambda d: _without_field(d, "ticks", "frame"), "'frame'"),
}


@pytest.mark.parametrize("case", list(BAD_HEADERS))
def test_a_header_with_a_valid_crc_but_bad_content_is_refused_before_use(tmp_path, case):
    from hil.recording.hilrec import read_run_recording
    change, words = BAD_HEADERS[case]
    with pytest.raises(RecordingError, match=words.replace("(", r"\(")):
        read_run_recording(str(rewritten(tmp_path, change)))


def test_the_shipped_recordings_pass_the_header_check():
    from hil.recording.hilrec import read_run_recording
    for path in sorted((REPO / "tests" / "data").glob("*.hilrec")):
        assert len(read_run_recording(str(path)).read("ticks")) == 50


def test_a_header_longer_than_the_bound_is_refused_before_it_is_read(tmp_path):
    import struct

    from hil.recording.hilrec import MAGIC, MAX_HEADER_BYTES
    path = tmp_path / "long.hilrec"
    path.write_bytes(MAGIC + struct.pack("<I", MAX_HEADER_BYTES + 1) + b"{}")
    with pytest.raises(RecordingError, match="header of"):
        RecordingReader(path)


def recording_command(command, path, tmp_path):
    """``hil COMMAND PATH`` with the options it needs, bounded as tests/hil/test_attacks_config.hil_process."""
    from helpers import free_port, hil_process
    extra = {"export": ["--csv", tmp_path / "out.csv"], "report": ["--out", tmp_path / "report"],
             "view": ["--port", free_port()], "replay": []}[command]
    return hil_process(command, path, *extra)


COMMANDS = ["replay", "export", "report", "view"]


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("kind", ["device", "fifo"])
def test_a_device_or_fifo_as_the_recording_is_one_line(tmp_path, command, kind):
    from helpers import assert_one_error_line
    path = "/dev/zero"
    if kind == "fifo":
        path = tmp_path / "run.hilrec"
        os.mkfifo(path)
    assert_one_error_line(*recording_command(command, path, tmp_path), str(path), "not a regular file")


@pytest.mark.parametrize("case, command", [("a JSON list", "replay"), ("no streams", "export"),
                                           ("not UTF-8", "report"), ("zero-size record", "view"),
                                           ("period 0", "view"), ("period 0", "report"),
                                           ("object records", "replay")])
def test_a_bad_header_is_one_line_in_each_command(tmp_path, case, command):
    from helpers import assert_one_error_line
    change, words = BAD_HEADERS[case]
    path = rewritten(tmp_path, change)
    assert_one_error_line(*recording_command(command, path, tmp_path), str(path), words)


def test_a_recording_larger_than_half_the_memory_is_refused_unread(tmp_path):
    path = tmp_path / "huge.hilrec"
    with open(path, "wb") as fh:                   # sparse: no disk used, and never read
        fh.truncate(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2 + 1)
    with pytest.raises(RecordingError, match="bytes; at most"):
        RecordingReader(path)
