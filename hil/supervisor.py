"""The supervisor side of ``hil run`` / ``hil serve``: start the real-time process, watch it, forward
signals, and speak systemd's notify protocol.

sd_notify (systemd.exec(5), sd_notify(3)): datagrams ``READY=1`` once the loop runs, ``WATCHDOG=1``
every WATCHDOG_USEC/2 **only while the loop's tick counter advances** (a hung loop is then restarted
by systemd), ``STOPPING=1`` when a stop is requested, sent to the AF_UNIX socket named by
``NOTIFY_SOCKET`` (a leading ``@`` means the abstract namespace). Without NOTIFY_SOCKET nothing is sent.
"""
from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import socket
import time

from hil import service


class Notifier:
    def __init__(self) -> None:
        addr = os.environ.get("NOTIFY_SOCKET")
        self.addr = None if not addr else ("\0" + addr[1:] if addr.startswith("@") else addr)
        usec = os.environ.get("WATCHDOG_USEC")
        pid = os.environ.get("WATCHDOG_PID")
        self.watchdog_s = (int(usec) / 1e6 / 2) if usec and usec.isdigit() and (not pid or pid == str(os.getpid())) else None
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) if self.addr else None

    def send(self, message: str) -> None:
        if self.sock is not None:
            try:
                self.sock.sendto(message.encode(), self.addr)
            except OSError:
                pass  # systemd gone: nothing useful to do

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()


def supervise(config_path: str, duration, record, on_poll=None, notify: bool = False, port_file=None) -> dict:
    """Run the real-time process to completion; returns its summary dict (``ok`` False on errors)."""
    ctx = mp.get_context("spawn")
    status = ctx.Array("d", len(service.STATUS_FIELDS), lock=False)
    results = ctx.Queue()
    proc = ctx.Process(target=service.rt_main, name="hil-rt",
                       args=(config_path, duration, status, results, None if record is None else str(record),
                             None if port_file is None else str(port_file)))
    stop_i = service.STATUS_FIELDS.index("stop_request")
    state_i = service.STATUS_FIELDS.index("state")
    notifier = Notifier() if notify else None

    def _stop(*_):
        if not status[stop_i] and notifier is not None:
            notifier.send("STOPPING=1")
        status[stop_i] = 1.0

    old = {sig: signal.signal(sig, _stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    proc.start()
    ready = False
    last_ticks, last_ping = -1.0, 0.0
    try:
        while proc.is_alive():
            proc.join(0.05)
            running = status[state_i] == service.STATE_RUNNING
            if notifier is not None and running:
                if not ready:
                    notifier.send("READY=1")
                    ready = True
                now = time.monotonic()
                if (notifier.watchdog_s and not status[stop_i] and now - last_ping >= notifier.watchdog_s
                        and status[0] > last_ticks):                 # no pings once STOPPING=1 went out
                    notifier.send("WATCHDOG=1")
                    last_ping, last_ticks = now, status[0]
            if on_poll is not None:
                on_poll(status)
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        if notifier is not None:
            notifier.close()
        if port_file is not None and not proc.is_alive():   # the ports are gone: so is their announcement
            with contextlib.suppress(OSError):
                os.unlink(port_file)
    try:
        return results.get(timeout=2.0)
    except Exception:
        return {"ok": False, "error": f"the real-time process died (exit code {proc.exitcode})"}
