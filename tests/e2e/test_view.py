"""The live and replay view (README "Live view"): the status block and the kinematics here, and the page in a
real headless Chromium (Debian's ``chromium``, driven by Playwright; skipped only where it is not installed).

One real-time run with ``--view`` (the elbow-hold channels, swung by a playback schedule) serves both browser
tests: the live page is checked while it runs (no console errors, the arm moves, the GH marker and values match
the recording at the tick shown, the README screenshot), and its recording is then replayed with ``hil view``
(play, pause, speed, seek)."""
from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from helpers import free_port

from hil.view.block import BLOCK_DTYPE, ViewBlock, ViewWriter

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
SCREENSHOT = ROOT / "examples" / "view" / "live.png"
"""The README's screenshot, rewritten by the live test only when FES_HIL_SCREENSHOT=1 (else into tmp)."""
needs_chromium = pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                    reason=f"Debian's chromium is not installed ({CHROMIUM}; apt-get install chromium)")


# ---------------------------------------------------------------------------------------------------
# without a browser

def test_landmarks_are_the_models_own_kinematics(model):
    """The drawn hand is the plant's hand position (the multibody kernel's), at rest and at other postures."""
    from sim.das3.kinematics import LANDMARKS, landmarks
    from sim.das3.plant import Plant

    lo, hi = model.dof_ranges[:, 0], model.dof_ranges[:, 1]
    rng = np.random.default_rng(3)
    postures = [model.equilibrium_state[:11]] + [lo + (hi - lo) * rng.uniform(0.2, 0.8, 11) for _ in range(3)]
    points = landmarks(model.arrays, np.array(postures))
    for q, pts in zip(postures, points):
        x = np.array(model.equilibrium_state)
        x[:11] = q
        np.testing.assert_allclose(pts[LANDMARKS.index("HAND")], Plant(model, initial_state=x).outputs.hand_position,
                                   atol=1e-12)
    upper_arm = np.linalg.norm(points[:, LANDMARKS.index("EL")] - points[:, LANDMARKS.index("GH")], axis=1)
    np.testing.assert_allclose(upper_arm, np.linalg.norm(model.arrays.joint_loc[9]), atol=1e-12)   # a rigid humerus


class _Engine:
    """What the writer reads of the tick engine: its channel count and its counters."""

    def __init__(self, n_channels: int) -> None:
        from hil.telemetry.counters import RunCounters
        self.n_channels, self.counters = n_channels, RunCounters.private()


def _tick_record(n_channels: int) -> np.ndarray:
    from drivers.core.contract import frame_dtype
    from hil.rt.tick import tick_dtype
    return np.zeros(1, tick_dtype(n_channels, 138, frame_dtype()))


def test_the_writer_writes_every_nth_tick_and_counts_every_tick():
    """At 4 ms the block is written every 3rd tick (<= 100 Hz); misses and the largest lateness cover the
    ticks in between; a reader never takes a copy while the writer is inside a write."""
    block = ViewBlock.create()
    record, engine, writer = _tick_record(2), _Engine(2), ViewWriter(block, 0.004)
    try:
        assert writer.every == 3 and block.read() is None
        written = []
        for tick in range(10):
            rec = record[0]
            rec["tick"], rec["lateness_ns"], rec["skipped_deadlines"] = tick, 1000 * tick, tick in (1, 4)
            rec["frame"]["q"][9], rec["frame"]["gh_force"] = 0.1 * tick, (tick, 2.0, 3.0)
            rec["applied"][1, :3] = (300.0, tick, 40.0)
            engine.counters.gh_unstable_ticks.set(tick)
            writer.on_tick(record, engine, 0)
            snap = block.read()
            written.append(int(snap["tick"][0]))
        assert written == [0, 0, 0, 3, 3, 3, 6, 6, 6, 9]
        assert snap["q"][0, 9] == pytest.approx(0.9) and list(snap["gh_force"][0]) == [9.0, 2.0, 3.0]
        assert list(snap["applied"][0, 1]) == [300.0, 9.0, 40.0] and snap["n_channels"][0] == 2
        assert snap["deadline_misses"][0] == 2 and snap["gh_unstable_ticks"][0] == 9 and snap["status"][0] == 0
        assert snap["max_lateness_ns"][0] == 9000 and snap["lateness_ns"][0] == 9000
        block.seq.value += 1                       # a write in progress
        assert block.read(tries=50) is None
        block.seq.value += 1
        assert block.read()["tick"][0] == 9
    finally:
        writer.close()
        block.release()


DISTINCT_TICKS = 8
MAX_READS = 2_000_000


def test_reads_are_never_torn_while_a_writer_writes():
    """A writer thread switched out anywhere between the calls of its writes (switch interval 1 us): every
    copy a reader keeps holds one tick's record fields and the writer's counters together."""
    import threading

    block = ViewBlock.create()
    record, engine = _tick_record(1), _Engine(1)
    writer, stop = ViewWriter(block, 0.01), threading.Event()

    def write():
        tick = 0
        while not stop.is_set():
            tick += 1
            record[0]["tick"], record[0]["frame"]["q"] = tick, tick
            engine.counters.gh_unstable_ticks.set(tick)
            writer.on_tick(record, engine, 0)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    thread = threading.Thread(target=write)
    thread.start()
    seen, reads, torn = set(), 0, 0
    try:   # read until the writer has published several ticks (however the threads are scheduled)
        while len(seen) < DISTINCT_TICKS and reads < MAX_READS:
            snap = block.read()
            if snap is None:
                continue
            reads += 1
            seen.add(int(snap["tick"][0]))
            consistent = np.all(snap["q"] == snap["tick"][:, None]) and np.all(snap["gh_unstable_ticks"] == snap["tick"])
            torn += not consistent
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(old)
    writer.close()
    block.release()
    assert len(seen) >= DISTINCT_TICKS and torn == 0, (len(seen), reads, torn)


def test_block_is_small():
    """One write copies at most about 100 numbers: the gathered span and the writer's five counters."""
    from hil.view.block import gather_index
    assert BLOCK_DTYPE.itemsize <= 100 * 8
    assert len(gather_index(_tick_record(16).dtype, 16)) + 5 * 8 <= 100 * 8


# ---------------------------------------------------------------------------------------------------
# the HTTP server under hostile clients (real sockets on 127.0.0.1, an in-process server, stand-in sources)

class _Replay:
    """A replay source of two large chunks."""
    mode, info_bytes = "replay", b"{}"
    body = b"[" + b"0," * 4_000_000 + b"0]"

    def chunk(self, k: int):
        return self.body if k in (0, 1) else None


class _Live:
    """A live source with a 4 KB sample every 5 ms; counts its open streams."""
    mode, info_bytes = "live", b"{}"

    def __init__(self) -> None:
        import threading
        self.clients, self.lock = 0, threading.Lock()

    def watch(self, delta: int) -> None:
        with self.lock:
            self.clients += delta

    def wait(self, version: int, timeout_s: float):
        time.sleep(0.005)
        return version + 1, b"x" * 4096


@pytest.fixture
def view_server():
    """A running :class:`hil.view.server.ViewServer` on a free port of 127.0.0.1 (source set by the test)."""
    import threading

    from hil.view.server import bind
    server = bind("127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server
    server.stopping.set()
    server.shutdown()
    server.server_close()


def _connect(server, rcvbuf: int | None = None):
    import socket
    sock = socket.socket()
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(10.0)
    sock.connect(server.server_address[:2])
    return sock


def _read_all(sock, limit: int = 64 << 20) -> bytes:
    chunks, size = [], 0
    while size < limit:
        data = sock.recv(65536)
        if not data:
            break
        chunks.append(data)
        size += len(data)
    return b"".join(chunks)


def _get(server, target: bytes) -> tuple[int, bytes]:
    """Status and body of ``GET target`` sent as raw bytes."""
    with _connect(server) as sock:
        sock.sendall(b"GET " + target + b" HTTP/1.0\r\n\r\n")
        head, _, body = _read_all(sock).partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def _reset(sock) -> None:
    """Close so that the peer sees a reset, as a client that goes away mid-answer."""
    import socket
    import struct
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def _wait_until(condition, timeout_s: float = 60.0) -> None:
    t_end = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < t_end, "condition not met"
        time.sleep(0.02)


def test_chunk_queries_are_parsed_strictly(view_server, capfd):
    """Only ?i=<ASCII digits, at most 9> is a chunk number; anything else is 400, never a traceback."""
    view_server.source = _Replay()
    bad = [b"9" * 5000, b"\xb2", b"\xd9\xa3", b"-1", b"", b"1.0", b" 1", b"1&i=2", b"0x1", b"1" * 10]
    for value in bad:
        assert _get(view_server, b"/api/chunk?i=" + value)[0] == 400, value
    assert _get(view_server, b"/api/chunk?x=1")[0] == 400
    status, body = _get(view_server, b"/api/chunk?i=1")
    assert status == 200 and body.startswith(b"[0,")
    assert _get(view_server, b"/api/chunk?i=999999999")[0] == 404
    assert view_server.server_errors == 0
    assert capfd.readouterr().err == ""


def test_clients_that_leave_before_their_answer_are_counted_not_printed(view_server, capfd):
    """Clients that reset the connection while a large answer is being sent, or before sending their
    request, or halfway through it: counted as the clients' doing, nothing on stderr."""
    view_server.source = _Replay()
    for _ in range(5):
        sock = _connect(view_server, rcvbuf=4096)
        sock.sendall(b"GET /api/chunk?i=0 HTTP/1.0\r\n\r\n")
        sock.recv(100)                       # the answer has started
        _reset(sock)
        _reset(_connect(view_server))
        sock = _connect(view_server)
        sock.sendall(b"GET /api/ch")
        _reset(sock)
    _wait_until(lambda: view_server.client_errors >= 5, timeout_s=15.0)
    assert _get(view_server, b"/api/info") == (200, b"{}")
    assert view_server.server_errors == 0
    assert capfd.readouterr().err == ""


def test_a_failure_of_the_server_is_one_line_at_most_every_few_seconds(view_server, capfd):
    """A source that raises on every chunk: each request fails and is counted; stderr gets one line, not a
    traceback per request."""
    class Broken(_Replay):
        def chunk(self, k: int):
            raise RuntimeError("chunk boom")

    view_server.source = Broken()
    for _ in range(5):
        with _connect(view_server) as sock:
            sock.sendall(b"GET /api/chunk?i=0 HTTP/1.0\r\n\r\n")
            _read_all(sock)
    _wait_until(lambda: view_server.server_errors == 5, timeout_s=15.0)
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and "RuntimeError: chunk boom" in err and "Traceback" not in err, err


def test_idle_connections_make_room_and_busy_ones_get_503(view_server):
    """Connections that send no request (a slowloris) hold at most MAX_CONNECTIONS threads, and each
    newcomer takes the place of the oldest of them, so a page's request is still answered; when every slot
    is busy answering (clients that do not read), a newcomer gets 503 at once."""
    import threading

    from hil.view.server import MAX_CONNECTIONS

    view_server.source = _Replay()
    view_server.client_timeout_s = 60.0
    threads_before = threading.active_count()
    idle = [_connect(view_server) for _ in range(MAX_CONNECTIONS + 10)]
    try:
        assert _get(view_server, b"/api/info") == (200, b"{}")
        for sock in idle[:11]:                  # the oldest, cut for the ten after them and the page
            assert _read_all(sock) == b""
        assert threading.active_count() <= threads_before + MAX_CONNECTIONS
        assert view_server.evicted == 11 and view_server.refused == 0
    finally:
        for sock in idle:
            sock.close()
    busy = []
    try:
        for _ in range(MAX_CONNECTIONS):
            busy.append(_connect(view_server, rcvbuf=4096))
            busy[-1].sendall(b"GET /api/chunk?i=0 HTTP/1.0\r\n\r\n")
        _wait_until(lambda: view_server.open_connections == MAX_CONNECTIONS and not view_server.reading)
        assert _get(view_server, b"/api/info")[0] == 503
        assert threading.active_count() <= threads_before + MAX_CONNECTIONS and view_server.refused == 1
    finally:
        for sock in busy:
            _reset(sock)
    _wait_until(lambda: _get(view_server, b"/api/info") == (200, b"{}"))


def test_streams_that_stop_reading_are_dropped_with_little_queued(view_server):
    """MAX_STREAMS streams whose clients never read: a further one gets 503; each is dropped one client
    timeout after its writes block, which comes after little data (the stream's send buffer is small, not
    megabytes), and then a new stream is served."""
    from hil.view.server import MAX_STREAMS

    source = view_server.source = _Live()
    view_server.client_timeout_s = 0.5
    stuck = []
    for _ in range(MAX_STREAMS):
        stuck.append(_connect(view_server, rcvbuf=8192))
        stuck[-1].sendall(b"GET /api/stream HTTP/1.0\r\n\r\n")
    _wait_until(lambda: source.clients == MAX_STREAMS)
    assert _get(view_server, b"/api/stream")[0] == 503
    _wait_until(lambda: source.clients == 0)
    queued = [len(_read_all(sock)) for sock in stuck]
    assert max(queued) < 1 << 20, queued          # bytes the server queued for a client that never read
    with _connect(view_server) as sock:
        sock.sendall(b"GET /api/stream HTTP/1.0\r\n\r\n")
        assert sock.recv(12) == b"HTTP/1.0 200"
    for sock in stuck:
        sock.close()


# ---------------------------------------------------------------------------------------------------
# in Chromium

def _wait_http(url: str, proc, timeout_s: float = 60.0) -> None:
    t_end = time.monotonic() + timeout_s
    while True:
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except OSError:
            if proc.poll() is not None:
                raise AssertionError(f"the server exited early: {proc.communicate()[1]}") from None
            if time.monotonic() > t_end:
                raise AssertionError(f"{url} did not answer") from None
            time.sleep(0.1)


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


VIEWPORT = {"width": 1280, "height": 800}
"""A laptop's screen: the arm, the glenoid, the stimulation and the alarms must fit it without scrolling."""


def _page(browser):
    """A page at VIEWPORT and the list its console errors and uncaught exceptions go to."""
    page = browser.new_page(viewport=VIEWPORT)
    errors = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    return page, errors


SWING = """
[metrics]
port = {port}
[[driver]]
type = "loopback"
controller = "playback"
file = "swing.csv"
direct = false
rate_hz = 50
"""


def _swing_schedule(path: Path, duration_s: float = 8.0) -> None:
    """Channel playback that keeps the arm moving: anterior deltoid (channel 1) at 0.25 Hz and biceps
    (channel 4) at 0.5 Hz, each from the threshold (15 mA at 300 us) up and down again."""
    t = np.arange(0.0, duration_s, 0.02)
    deltoid = 15 + 45 * (0.5 - 0.5 * np.cos(2 * np.pi * 0.25 * t))
    biceps = 15 + 25 * (0.5 - 0.5 * np.cos(2 * np.pi * 0.5 * t))
    rows = "".join(f"{a:.2f},300,{d:.2f},40,300,{b:.2f},40\n" for a, d, b in zip(t, deltoid, biceps))
    path.write_text("time,ch1_pw_us,ch1_amp_ma,ch1_freq_hz,ch4_pw_us,ch4_amp_ma,ch4_freq_hz\n" + rows)


@pytest.fixture(scope="module")
def live_run(tmp_path_factory):
    """A 6 s real-time run of the elbow-hold config's channels with ``--view``, its controller replaced by a
    schedule that swings the arm (metrics on a free port): (process, view URL, recording)."""
    work = tmp_path_factory.mktemp("live")
    _swing_schedule(work / "swing.csv")
    cfg = work / "live.toml"
    cfg.write_text(f'include = ["{ROOT / "configs" / "elbow-hold.toml"}"]\n' + SWING.format(port=free_port()))
    rec, port = work / "live.hilrec", free_port()
    proc = subprocess.Popen([sys.executable, "-m", "hil", "run", "--config", str(cfg), "--duration", "6",
                             "--record", str(rec), "--view", str(port)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        _wait_http(f"http://127.0.0.1:{port}/api/info", proc)
        yield proc, f"http://127.0.0.1:{port}/", rec
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)


def _png(data: bytes) -> np.ndarray:
    import matplotlib.image
    return (matplotlib.image.imread(io.BytesIO(data))[..., :3] * 255).round()


SHOWN = """() => ({tick: hilView.drawn.tick, t: hilView.drawn.t, gh: hilView.drawn.gh, pts: hilView.drawn.pts,
           status: hilView.drawn.status, glenoid: hilView.glenoid, fps: hilView.fps, px: hilView.px,
           theta: document.getElementById('gh-theta').dataset.value,
           phi: document.getElementById('gh-phi').dataset.value,
           stability: document.getElementById('gh-stability').dataset.value,
           tickText: document.getElementById('tick').textContent})"""


LAYOUT = """() => {
  const box = el => { const r = el.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
  const canvas = id => [document.getElementById(id).width, document.getElementById(id).height];
  return {boxes: Object.fromEntries(["frontal", "sagittal", "glenoid", "alarms", "stim"].map(
            id => [id, box(document.getElementById(id))])),
          rights: [...document.querySelectorAll("main .panel")].map(el => box(el)[2]),
          scroll: [document.documentElement.scrollWidth, document.documentElement.scrollHeight],
          extent: hilView.extent, canvas: {frontal: canvas("frontal"), sagittal: canvas("sagittal")},
          labels: hilView.labels};
}"""


def _overlapping(labels: list[dict]) -> list[tuple[str, str]]:
    """Pairs of labels on one canvas whose boxes overlap."""
    return [(a["text"], b["text"]) for i, a in enumerate(labels) for b in labels[i + 1:]
            if a["x0"] < b["x1"] and b["x0"] < a["x1"] and a["y0"] < b["y1"] and b["y0"] < a["y1"]]


def _check_layout(page) -> None:
    """At VIEWPORT: arm, glenoid, stimulation and alarms inside the first screen, the cards across the full width,
    the thorax and arm drawn large in their card, and no label on a canvas over another."""
    shown = page.evaluate(LAYOUT)
    width, height = VIEWPORT["width"], VIEWPORT["height"]
    for name, (left, top, right, bottom) in shown["boxes"].items():
        assert 0 <= left and right <= width and 0 <= top and bottom <= height, (name, shown["boxes"][name])
    assert shown["scroll"][0] <= width                                     # no sideways scrolling
    assert max(shown["rights"]) > 0.95 * width                             # no empty right side
    for plane in ("frontal", "sagittal"):
        x0, y0, x1, y1 = shown["extent"][plane]                            # px: the thorax and the arm
        spread = np.array([x1 - x0, y1 - y0]) / np.array(shown["canvas"][plane])
        assert spread.max() > 0.55, (plane, spread)                        # of the card's width or height
    for canvas, labels in shown["labels"].items():
        assert _overlapping(labels) == [], canvas


def _recorded(rec: Path) -> np.ndarray:
    from hil.recording.hilrec import RecordingReader
    return RecordingReader(rec).read("ticks")


def _check_shown_against_recording(shown: dict, ticks: np.ndarray, model) -> None:
    """The sample drawn is the recording's at its tick: the arm's points (from q), GH angles and stability."""
    from drivers.core.contract import STATUS_GH_UNSTABLE
    from hil.reports.run_report import glenoid_angles
    from sim.das3.kinematics import landmarks

    row = ticks[ticks["tick"] == shown["tick"]]["frame"]
    assert len(row) == 1 and shown["tickText"] == str(shown["tick"])
    np.testing.assert_allclose(np.array(shown["pts"]).reshape(-1, 3), landmarks(model.arrays, row["q"])[0], atol=2e-5)
    theta, phi = (float(a[0]) for a in glenoid_angles(row["gh_force"], model.arrays.glenoid))
    stability = float(row["gh_stability"][0])
    assert shown["gh"] == pytest.approx([theta, phi, stability], abs=2e-6)
    assert [float(shown[k]) for k in ("theta", "phi", "stability")] == pytest.approx([theta, phi, stability], abs=2e-6)
    g = shown["glenoid"]
    expected = (g["cx"] + phi * g["k"], g["cy"] - theta * g["k"])     # phi across, theta up
    assert g["marker"] == pytest.approx(expected, abs=0.5)
    unstable = bool(row["status"][0] & STATUS_GH_UNSTABLE)
    assert g["colour"] == ("rgb(214, 32, 32)" if unstable else "rgb(0, 150, 60)")


@needs_chromium
def test_live_view_follows_the_run(browser, live_run, model, tmp_path):
    proc, url, rec = live_run
    page, errors = _page(browser)
    page.goto(url)
    page.wait_for_function("window.hilView.drawn && window.hilView.drawn.tick > 0", timeout=60_000)
    assert page.text_content("#mode") == "live view" and str(rec) in page.text_content("#recording")
    first_arm = page.locator("#frontal").screenshot()
    hands, fps = [], []
    for _ in range(12):                                # the elbow swings between about 60 and 130 deg
        shown = page.evaluate(SHOWN)
        hands.append(shown["px"]["frontal"]["HAND"] + shown["px"]["sagittal"]["HAND"])
        fps.append(shown["fps"])
        time.sleep(0.25)
    moved = np.ptp(np.array(hands), axis=0)
    assert moved.max() > 20, hands                     # px
    assert np.count_nonzero(np.abs(_png(first_arm) - _png(page.locator("#frontal").screenshot())).sum(-1) > 30) > 200
    assert max(fps) > 0, fps                          # drawing (the frame rate is measured, not asserted)
    page.wait_for_function("window.hilView.drawn.t > 3.0", timeout=20_000)
    _check_layout(page)
    shot = SCREENSHOT if os.environ.get("FES_HIL_SCREENSHOT") == "1" else tmp_path / "live.png"
    shot.parent.mkdir(exist_ok=True)
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    page.click("#hold")                                # the display stops at one sample
    shown = page.evaluate(SHOWN)
    glenoid = _png(page.locator("#glenoid").screenshot())
    time.sleep(0.3)
    assert page.evaluate("window.hilView.drawn.tick") == shown["tick"]
    assert errors == []
    page.close()
    assert proc.wait(timeout=60) == 0, proc.stderr.read()
    assert "Traceback" not in proc.stderr.read()               # every process let go of its blocks
    _check_shown_against_recording(shown, _recorded(rec), model)
    u, v = (int(round(c)) for c in shown["glenoid"]["marker"])
    colour = [int(c) for c in shown["glenoid"]["colour"][4:-1].split(",")]
    assert glenoid[v, u] == pytest.approx(colour, abs=12)    # the marker is drawn where the angles say


@needs_chromium
def test_replay_plays_pauses_seeks_and_changes_speed(browser, live_run, model):
    proc, _, rec = live_run
    assert proc.wait(timeout=60) == 0
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "hil", "view", str(rec), "--port", str(port)], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_http(f"http://127.0.0.1:{port}/api/info", server)
        page, errors = _page(browser)
        slow_cpu = page.context.new_cdp_session(page)     # a busy lab PC: frames far apart as the first chunk comes
        slow_cpu.send("Emulation.setCPUThrottlingRate", {"rate": 20})
        page.goto(f"http://127.0.0.1:{port}/")
        page.wait_for_function("window.hilView.drawn", timeout=60_000)
        slow_cpu.send("Emulation.setCPUThrottlingRate", {"rate": 1})
        assert page.text_content("#mode") == "replay"
        assert page.evaluate("hilView.first") == 0 and page.text_content("#play") == "pause"   # drawn, playing
        page.wait_for_function("window.hilView.drawn.t > 2.0", timeout=20_000)
        assert min(page.evaluate("hilView.charts['angles-th']")) > 50        # the traces fill without a click
        _check_layout(page)
        page.click("#play")                                                  # pause
        page.eval_on_selector("#seek", "el => { el.value = '0'; el.dispatchEvent(new Event('input')); }")
        page.wait_for_function("window.hilView.drawn.tick === 0", timeout=10_000)
        start = page.evaluate(SHOWN)
        rate = {speed: _play_rate(page, speed) for speed in ("1", "4")}
        assert 0.6 < rate["1"] < 1.3 and 2.5 < rate["4"] / rate["1"] < 6, rate    # s of run per s, ratio
        played = page.evaluate(SHOWN)
        assert np.abs(np.array(played["pts"]) - np.array(start["pts"])).max() > 0.02    # the arm moved (m)
        time.sleep(0.3)
        assert page.evaluate("window.hilView.drawn.tick") == played["tick"]     # paused
        page.eval_on_selector("#seek", "el => { el.value = '200'; el.dispatchEvent(new Event('input')); }")
        page.wait_for_function("window.hilView.drawn.tick === 1000", timeout=10_000)   # sample 200 of 50 Hz
        seeked = page.evaluate(SHOWN)
        _check_shown_against_recording(seeked, _recorded(rec), model)
        assert errors == []
        page.close()
    finally:
        server.send_signal(signal.SIGTERM)
        server.communicate(timeout=30)
    assert server.returncode == 0


def _play_rate(page, speed: str) -> float:
    """Seconds of the run played per second of wall time at ``speed``, from the start; leaves it paused."""
    page.eval_on_selector("#seek", "el => { el.value = '0'; el.dispatchEvent(new Event('input')); }")
    page.select_option("#speed", speed)
    page.wait_for_function("window.hilView.drawn.tick === 0", timeout=10_000)
    page.click("#play")
    t0, wall0 = page.evaluate("[hilView.drawn.t, performance.now()]")
    time.sleep(0.6)
    t1, wall1 = page.evaluate("[hilView.drawn.t, performance.now()]")
    page.click("#play")
    return (t1 - t0) / ((wall1 - wall0) / 1000)
