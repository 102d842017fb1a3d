"""The metrics exporter under hostile or broken clients, against a real exporter process on 127.0.0.1:
clients that never finish a request, a burst of connections, and the death of the exporter's parent."""
import multiprocessing as mp
import os
import signal
import socket
import time
import urllib.request

import pytest
from helpers import free_port

from hil.telemetry.exporter import EXPORTER_IDLE_TIMEOUT_S, EXPORTER_MAX_CONNECTIONS, start_exporter
from hil.telemetry.metrics import MetricsBlock, MetricsSchema, default_schema

HALF_REQUEST = b"GET /metrics HTTP/1.1\r\nHost: x\r\n"      # no blank line: the request never ends
SIGTERM_BIT = 1 << (signal.SIGTERM - 1)


def new_block():
    return MetricsBlock.create(MetricsSchema(default_schema(["0:loopback"], ["amplitude_limit"])))


@pytest.fixture
def exporter():
    """``(process, port)`` of an exporter serving a fresh block; stopped and released afterwards."""
    block = new_block()
    port = free_port()
    proc = start_exporter(block, "127.0.0.1", port, mp.get_context("spawn"))
    block.counter("hil_ticks_total").inc(7)
    try:
        yield proc, port
    finally:
        proc.terminate()
        proc.join(5)
        block.release()


def scrape_text(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        assert r.status == 200
        return r.read().decode()


def open_half_requests(port, n):
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=2)
        s.sendall(HALF_REQUEST)
        socks.append(s)
    return socks


def closed_by_server(sock, deadline):
    """Whether the server closed ``sock`` (EOF or reset) before ``deadline`` (monotonic)."""
    while True:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            if not sock.recv(4096):
                return True
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False


def proc_status(pid, field):
    with open(f"/proc/{pid}/status") as f:
        return next(line.split(":", 1)[1].strip() for line in f if line.startswith(field + ":"))


def gone(pid):
    """Exited: no such process, or a zombie nobody has reaped yet (it is not our child)."""
    try:
        return proc_status(pid, "State").startswith(("Z", "X"))
    except (FileNotFoundError, ProcessLookupError):
        return True


def wait_until(predicate, timeout_s, step_s=0.01):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(step_s)
    return True


def test_half_requests_do_not_keep_out_a_scrape_and_are_closed_after_the_timeout(exporter):
    _, port = exporter
    socks = open_half_requests(port, 40)
    deadline = time.monotonic() + EXPORTER_IDLE_TIMEOUT_S + 2.0
    try:
        t0 = time.monotonic()
        assert "hil_ticks_total 7.0" in scrape_text(port)
        assert time.monotonic() - t0 < 3.0
        still_open = [i for i, s in enumerate(socks) if not closed_by_server(s, deadline)]
        assert not still_open, f"connections {still_open} still open after the exporter's timeout"
    finally:
        for s in socks:
            s.close()


def test_thread_count_stays_bounded_while_half_requests_are_held(exporter):
    proc, port = exporter
    socks = open_half_requests(port, 40)
    try:
        scrape_text(port)                       # queued behind the 40: all of them have been accepted
        most = 0
        for _ in range(20):
            most = max(most, int(proc_status(proc.pid, "Threads")))
            time.sleep(0.01)
        assert most <= EXPORTER_MAX_CONNECTIONS + 4
    finally:
        for s in socks:
            s.close()


def test_a_burst_of_connections_is_queued_without_drops_and_a_scrape_answers(exporter):
    """200 connects in a row, held open: none waits for a SYN retransmit (the first comes after 1 s),
    so the backlog took the whole burst; then a scrape answers."""
    _, port = exporter
    socks = []
    t0 = time.monotonic()
    try:
        for _ in range(200):
            socks.append(socket.create_connection(("127.0.0.1", port), timeout=5))
            assert time.monotonic() - t0 < 0.9, f"connect {len(socks)} of the burst had its SYN dropped"
        assert "hil_ticks_total 7.0" in scrape_text(port)
    finally:
        for s in socks:
            s.close()


def _start_exporter_and_wait(port, conn):
    """Intermediate process: the exporter's parent, killed by the test."""
    block = new_block()
    proc = start_exporter(block, "127.0.0.1", port, mp.get_context("spawn"))
    conn.send((proc.pid, block.shm.name))
    time.sleep(30)


def test_exporter_is_signalled_and_exits_when_its_parent_is_killed():
    """The exporter is stopped (SIGSTOP) while its parent is killed, so the SIGTERM the kernel sends on
    the parent's death (PR_SET_PDEATHSIG) stays pending where the test can see it; the getppid poll alone
    would not send one. Continued, it exits and unlinks the block its dead parent left behind."""
    ctx = mp.get_context("spawn")
    parent_end, child_end = ctx.Pipe(duplex=False)
    middle = ctx.Process(target=_start_exporter_and_wait, args=(free_port(), child_end), daemon=False)
    middle.start()
    exporter_pid = None
    try:
        assert parent_end.poll(30), "the intermediate process did not start the exporter"
        exporter_pid, shm_name = parent_end.recv()
        os.kill(exporter_pid, signal.SIGSTOP)
        assert wait_until(lambda: proc_status(exporter_pid, "State").startswith("T"), 2.0)
        os.kill(middle.pid, signal.SIGKILL)
        middle.join(5)
        assert wait_until(lambda: int(proc_status(exporter_pid, "ShdPnd"), 16) & SIGTERM_BIT, 2.0), \
            "no SIGTERM pending for the exporter after its parent died"
        os.kill(exporter_pid, signal.SIGCONT)
        assert wait_until(lambda: gone(exporter_pid), 2.0), "the exporter outlived its parent by 2 s"
        assert not os.path.exists(f"/dev/shm/{shm_name}")
    finally:
        if middle.is_alive():
            middle.kill()
            middle.join(5)
        if exporter_pid is not None and not gone(exporter_pid):
            os.kill(exporter_pid, signal.SIGKILL)
