"""The view's HTTP server: the page, ``/api/info``, and the samples as server-sent events (live) or JSON
chunks (replay).

Standard library only (``http.server``): the page needs one-way pushes of small JSON samples at 40 Hz,
which server-sent events give over plain HTTP (the browser's ``EventSource`` reconnects by itself), and a
replay's controls run in the page, which fetches chunks with ordinary GETs. Each connection has a thread,
at most ``MAX_CONNECTIONS`` at once (a newcomer takes the place of the oldest one still sending its request,
else gets 503 and is closed without a thread), of which at most ``MAX_STREAMS`` live streams; a client that
sends nothing or stops reading is dropped after ``CLIENT_TIMEOUT_S`` (a stream's send buffer is kept small,
so a blocked write comes soon after the client stops reading). A failed request is counted, never printed
as a traceback. The live server is a helper process of the supervisor (``hil-view``): it lowers its own
priority, stays off the loop's CPU, and stops when its parent does.
"""
from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources

from drivers.ipc.process import HelperStartError, die_with_parent, start_helper
from hil.config import ConfigOverrides, load_service_config
from hil.telemetry.connection_slots import ConnectionSlots
from hil.view.block import ViewBlock
from hil.view.scene import Scene
from hil.view.sources import LiveSource, ReplaySource
from sim.errors import UserInputError

MAX_STREAMS = 8
MAX_CONNECTIONS = 32
"""Connections served at once (each has a thread), streams included."""
CLIENT_TIMEOUT_S = 10.0
"""A client that sends nothing or takes nothing for this long is dropped (socket timeout)."""
STREAM_SEND_BUFFER_BYTES = 32 * 1024
"""A stream's kernel send buffer (fixed, not autotuned): a client that stops reading blocks the stream's
writes after a second or so of samples, so its timeout starts then and not after megabytes."""
ERROR_LOG_INTERVAL_S = 10.0
"""At most one line on stderr per this interval about requests that failed on the server's side."""
CHUNK_QUERY = re.compile(r"i=([0-9]{1,9})")
"""The only query ``/api/chunk`` takes: a chunk number of ASCII digits."""
BUSY_RESPONSE = (b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 18\r\n"
                 b"Connection: close\r\nRetry-After: 1\r\n\r\ntoo many clients\r\n")
STATIC_FILES = {"/": ("index.html", "text/html; charset=utf-8"), "/view.js": ("view.js", "text/javascript"),
                "/view.css": ("view.css", "text/css")}


class ViewError(UserInputError):
    """The view server could not start (e.g. its port is taken)."""


def static_bytes(name: str) -> bytes:
    """A file of the page, from the package (``hil/view/static``)."""
    return resources.files("hil.view").joinpath("static", name).read_bytes()


class _Handler(BaseHTTPRequestHandler):
    server_version = "hil-view"

    def setup(self) -> None:
        self.timeout = self.server.client_timeout_s
        super().setup()

    def log_message(self, format, *args):
        pass

    def do_GET(self) -> None:
        self.server.request_read(self.connection)
        path, _, query = self.path.partition("?")
        source = self.server.source
        if path in STATIC_FILES:
            name, kind = STATIC_FILES[path]
            self._send(self.server.files[name], kind)
        elif path == "/api/info":
            self._send(source.info_bytes, "application/json")
        elif path == "/api/stream" and source.mode == "live":
            self._stream(source)
        elif path == "/api/chunk" and source.mode == "replay":
            self._chunk(source, query)
        else:
            self.send_error(404)

    def _send(self, body: bytes, kind: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def _chunk(self, source, query: str) -> None:
        match = CHUNK_QUERY.fullmatch(query)
        if match is None:
            self.send_error(400, "expected ?i=<chunk number>")
            return
        body = source.chunk(int(match[1]))
        if body is None:
            self.send_error(404, "no such chunk")
        else:
            self._send(body, "application/json")

    def _stream(self, source) -> None:
        """Server-sent events: one ``data:`` line per new sample, a comment line each idle second."""
        if not self.server.streams.acquire(blocking=False):
            self.send_error(503, f"at most {MAX_STREAMS} live views at once")
            return
        source.watch(+1)
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, STREAM_SEND_BUFFER_BYTES)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            version = 0
            while not self.server.stopping.is_set():
                version, data = source.wait(version, 1.0)
                self.wfile.write(b"data: " + data + b"\n\n" if data else b": idle\n\n")
        except OSError:
            pass                # the page went away or stopped reading
        finally:
            source.watch(-1)
            self.server.streams.release()


class ViewServer(ConnectionSlots, ThreadingHTTPServer):
    """The page's server; ``source`` (:mod:`hil.view.sources`) may be set after it listens: requests wait
    in the listen backlog until :meth:`serve_forever` runs."""

    daemon_threads = True
    request_queue_size = 64

    def __init__(self, host: str, port: int, source=None) -> None:
        self.address_family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        super().__init__((host, port), _Handler)
        self.source = source
        self.files = {name: static_bytes(name) for name, _ in STATIC_FILES.values()}
        self.client_timeout_s = CLIENT_TIMEOUT_S
        self.init_slots(MAX_CONNECTIONS)
        self.streams = threading.BoundedSemaphore(MAX_STREAMS)
        self.stopping = threading.Event()
        self.refused = 0            # connections answered 503 for want of a slot
        self.client_errors = 0      # requests ended by the client (reset, closed early, timed out)
        self.server_errors = 0      # requests that failed on this side
        self.next_error_log = 0.0

    def refuse(self, request) -> None:
        """No slot: 503 and close, without a thread."""
        with self.slots_lock:
            self.refused += 1
        with contextlib.suppress(OSError):
            request.setblocking(False)
        with contextlib.suppress(OSError):
            request.recv(65536)             # what the client has sent already, so closing does not reset
        with contextlib.suppress(OSError):
            request.send(BUSY_RESPONSE)
        self.shutdown_request(request)

    def handle_error(self, request, client_address) -> None:
        """Count the failure; a client's doing (reset, early close, timeout) is not printed, a failure of
        this side is one line on stderr at most every ERROR_LOG_INTERVAL_S, never a traceback."""
        exc = sys.exc_info()[1]
        now = time.monotonic()
        with self.slots_lock:
            if isinstance(exc, OSError):
                self.client_errors += 1
                return
            self.server_errors += 1
            if now < self.next_error_log:
                return
            self.next_error_log = now + ERROR_LOG_INTERVAL_S
            count = self.server_errors
        text = f"{type(exc).__name__}: {exc}"[:200]
        print(f"hil-view: a request failed: {text} ({count} so far; the next such line comes "
              f"{ERROR_LOG_INTERVAL_S:g} s later at the earliest)", file=sys.stderr, flush=True)

    def stop(self) -> None:
        self.stopping.set()
        if self.source is not None and hasattr(self.source, "stop"):
            self.source.stop()
        self.shutdown()
        self.server_close()


def bind(host: str, port: int, source=None) -> ViewServer:
    """A :class:`ViewServer` listening on ``host:port``; ViewError naming the address if it cannot."""
    try:
        return ViewServer(host, port, source)
    except OSError as exc:
        raise ViewError(f"the view cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"


# ----------------------------------------------------------------------------------------------
# the live view's process (hil run --view, hil serve --view)

@dataclass(frozen=True)
class ViewSpec:
    """What the supervisor hands the view process (picklable)."""
    shm_name: str
    host: str
    port: int
    config_path: str
    overrides: ConfigOverrides
    record_path: str | None
    start_time_utc: str


def lower_priority(loop_cpu: int | None) -> None:
    """Normal scheduling at nice 10, and off the loop's CPU where another one is left: the view is the
    least important process of a run (the service unit starts every process SCHED_FIFO)."""
    with contextlib.suppress(OSError, AttributeError):
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    with contextlib.suppress(OSError):
        os.nice(10)
    with contextlib.suppress(OSError, AttributeError):
        others = os.sched_getaffinity(0) - {loop_cpu}
        if loop_cpu is not None and others:
            os.sched_setaffinity(0, others)


def _live_source(spec: ViewSpec):
    cfg = spec.overrides.apply(load_service_config(spec.config_path))
    identity = {"config_path": spec.config_path, "start_time": spec.start_time_utc, "recording": spec.record_path}
    return cfg, LiveSource(ViewBlock.attach(spec.shm_name), Scene(cfg, identity))


def run_view_server(spec: ViewSpec, parent_pid: int, conn) -> None:
    """Process target: listen, say ready, build the scene, serve until SIGTERM or the parent is gone."""
    import time

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    if not die_with_parent(parent_pid, name="hil-view"):
        return
    try:
        server = bind(spec.host, spec.port)
    except ViewError as exc:
        conn.send(("error", str(exc)))
        return
    conn.send(("ready", None))
    cfg, server.source = _live_source(spec)
    lower_priority(cfg.loop.cpu)
    server.source.start()
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()
    while not stop.is_set() and os.getppid() == parent_pid:
        time.sleep(0.2)
    server.source.block.owner = os.getppid() != parent_pid     # the supervisor died: nobody else unlinks it
    server.stop()


def start_view_server(spec: ViewSpec, ctx):
    """Start the view process; raises ViewError if it cannot listen, dies or does not answer."""
    try:
        proc, _, pipe = start_helper(ctx, run_view_server, (spec, os.getpid()), "hil-view",
                                     f"the live view on {spec.host}:{spec.port}", timeout_s=30.0)
    except HelperStartError as exc:
        raise ViewError(str(exc)) from None
    pipe.close()
    return proc


# ----------------------------------------------------------------------------------------------
# replay (hil view RUN.hilrec)

def _interrupt(*_) -> None:
    raise KeyboardInterrupt


def serve_replay(path: str, host: str, port: int, on_ready=None) -> None:
    """Serve the replay page of recording ``path`` in this process until Ctrl-C or SIGTERM."""
    server = bind(host, port, ReplaySource(path))
    if on_ready is not None:
        on_ready(url(host, port))
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.stopping.set()
        server.server_close()
