"""The supervisor side of ``hil run`` / ``hil serve``: start the real-time process, watch it, forward
signals, and speak systemd's notify protocol.

sd_notify (systemd.exec(5), sd_notify(3)): datagrams ``READY=1`` once the loop runs, ``WATCHDOG=1``
every WATCHDOG_USEC/2 **only while the loop's tick counter advances** (a hung loop is then restarted
by systemd), ``STOPPING=1`` when a stop is requested, sent to the AF_UNIX socket named by
``NOTIFY_SOCKET`` (a leading ``@`` means the abstract namespace). Without NOTIFY_SOCKET nothing is sent.
"""
from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing as mp
import os
import signal
import socket
import time
import traceback

from hil import service
from hil.rt_process import RtSpec
from hil.run_result import RunResult

SAFETY_STOP_REASONS = ("gh_unstable", "range_of_motion")
"""``stopped_by`` of a run ended by a safety action ``stop``."""


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


class MetricsHost:
    """The metrics block and its exporter process, owned by the supervisor: the exporter is restarted when
    it dies (the counters live in the block, so a restart loses none), with a growing pause between
    failed restarts. Monitoring is not a safety function: the run goes on while it is down, and a run
    whose exporter could not be restarted ends with exit status 5."""

    RETRY_S = (0.0, 1.0, 2.0, 5.0, 10.0, 30.0)

    def __init__(self, cfg) -> None:
        from drivers.contract import REJECT_REASONS
        from hil.metrics import MetricsBlock, MetricsSchema, default_schema
        from hil.stimulation import fatigue_channel_names

        self.cfg = cfg.metrics
        fatigue_channels = fatigue_channel_names(cfg.stimulation)
        self.block = MetricsBlock.create(MetricsSchema(default_schema(service.driver_names(cfg), list(REJECT_REASONS),
                                                                      fatigue_channels)))
        self.restarts = self.block.counter("hil_exporter_restarts_total")
        for channel in fatigue_channels:      # rested until the loop's first update
            self.block.gauge("hil_fatigue_fitness", channel=channel).set(1.0)
        self.proc = None
        self.deaths = 0
        self.failures: list[str] = []     # restarts that failed (why)
        self._failed_in_a_row = 0
        self._next_try = 0.0

    def start(self) -> None:
        from hil.exporter import start_exporter
        self.proc = start_exporter(self.block, self.cfg.host, self.cfg.port, mp.get_context("spawn"))

    def check(self) -> None:
        """Restart a dead exporter (called from the supervisor's poll loop)."""
        if self.proc is not None and self.proc.is_alive():
            return
        now = time.monotonic()
        if self.proc is not None:
            self.deaths += 1
            service.say(f"the metrics exporter died (exit code {self.proc.exitcode}); restarting it")
            self.proc = None
            self._next_try = now
        if now < self._next_try:
            return
        try:
            self.start()
        except Exception as exc:        # e.g. its port was taken meanwhile: try again later
            self._failed_in_a_row += 1
            self.failures.append(str(exc))
            pause = self.RETRY_S[min(self._failed_in_a_row, len(self.RETRY_S) - 1)]
            self._next_try = now + pause
            service.say(f"the metrics exporter could not be restarted ({exc}); next try in {pause:g} s")
            return
        self._failed_in_a_row = 0
        self.restarts.inc()

    def close(self) -> None:
        from drivers.process import stop_process
        if self.proc is not None:
            self.proc.terminate()
            stop_process(self.proc, 5.0)
        self.block.release()

    def report(self, summary: RunResult) -> None:
        summary.exporter_restarts = int(self.restarts.value)
        summary.exporter_deaths = self.deaths
        if self.failures and summary.ok:
            summary.problems.append(f"metrics were not exported for part of the run: {len(self.failures)} "
                                       f"restart(s) of the exporter failed (last: {self.failures[-1]})")


@dataclasses.dataclass(frozen=True)
class ViewOptions:
    """``--view PORT`` and ``--view-host``: where the live view's page is served."""
    port: int
    host: str = "127.0.0.1"


class ViewHost:
    """The live view's status block and its server process (:mod:`hil.view`), owned by the supervisor when
    ``--view`` is given. The view is not a safety function: a server that dies is restarted (a failed
    restart is tried again every RETRY_S), and the run goes on either way."""

    RETRY_S = 5.0

    def __init__(self, options: ViewOptions, spec: RtSpec, ctx) -> None:
        import datetime

        from hil.view.block import ViewBlock
        from hil.view.server import ViewSpec

        self.block = ViewBlock.create()
        started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        self.spec = ViewSpec(self.block.name, options.host, options.port, spec.config_path, spec.plant_type,
                             spec.record_path, started)
        self.ctx, self.proc, self._next_try = ctx, None, 0.0

    def start(self) -> None:
        from hil.view.server import start_view_server, url
        self.proc = start_view_server(self.spec, self.ctx)
        service.say(f"live view at {url(self.spec.host, self.spec.port)}")

    def check(self) -> None:
        """Restart a dead view server (called from the supervisor's poll loop)."""
        if self.proc is not None and self.proc.is_alive():
            return
        now = time.monotonic()
        if self.proc is not None:
            service.say(f"the live view died (exit code {self.proc.exitcode}); restarting it")
            self.proc, self._next_try = None, now
        if now < self._next_try:
            return
        try:
            self.start()
        except Exception as exc:
            self._next_try = now + self.RETRY_S
            service.say(f"the live view could not be restarted ({exc}); next try in {self.RETRY_S:g} s")

    def close(self) -> None:
        from drivers.process import stop_process
        if self.proc is not None:
            self.proc.terminate()
            stop_process(self.proc, 5.0)
        self.block.release()


class ServiceRun:
    """The processes of one run, seen from the supervisor: the metrics exporter and the live view (here)
    and the real-time process (which starts the recorder and the links). ``poll`` between waits keeps the
    exporter and the view alive."""

    def __init__(self, config_path: str, duration, record=None, port_file=None, plant_type=None,
                 view: ViewOptions | None = None) -> None:
        from hil.config import load_service_config, with_plant_type

        self.ctx = mp.get_context("spawn")
        self.status = service.RunStatus.create(self.ctx)
        self.results = self.ctx.Queue()
        self.cfg = with_plant_type(load_service_config(config_path), plant_type)
        self.spec = RtSpec(str(config_path), duration, None if record is None else str(record),
                           None if port_file is None else str(port_file), None, os.getpid(), plant_type)
        self.view_options = view
        self.metrics = self.view = None
        self.proc = None

    def start(self) -> None:
        """Exporter and view first (a busy port fails before any warm-up or recording), then the real-time
        process."""
        from hil.rt_process import rt_main
        if self.cfg.metrics.enabled:
            self.metrics = MetricsHost(self.cfg)
            try:
                self.metrics.start()
            except BaseException:
                self.metrics.block.release()
                self.metrics = None
                raise
            self.spec = dataclasses.replace(self.spec, metrics_shm=self.metrics.block.shm.name)
        if self.view_options is not None:
            self._start_view()
        self.proc = self.ctx.Process(target=rt_main, name="hil-rt", args=(self.spec, self.status, self.results))
        self.proc.start()

    def _start_view(self) -> None:
        self.view = ViewHost(self.view_options, self.spec, self.ctx)
        try:
            self.view.start()
        except BaseException:
            self.view.block.release()
            self.view = None
            raise
        self.spec = dataclasses.replace(self.spec, view_shm=self.view.block.name)

    def alive(self, wait_s: float = 0.05) -> bool:
        """Wait up to ``wait_s`` for the real-time process; restart a dead exporter or view; whether it still
        runs."""
        self.proc.join(wait_s)
        if self.metrics is not None:
            self.metrics.check()
        if self.view is not None:
            self.view.check()
        return self.proc.is_alive()

    def result(self, timeout_s: float = 2.0) -> dict:
        try:
            summary = self.results.get(timeout=timeout_s)
        except Exception:
            summary = RunResult(ok=False, error=f"the real-time process died (exit code {self.proc.exitcode})")
        if self.metrics is not None:
            self.metrics.report(summary)
        return summary

    def linger_after_safety_stop(self, summary: RunResult) -> None:
        """After a GH or range-of-motion stop, keep ``/metrics`` up for ``[metrics] linger_after_stop_ms``, so
        that a scrape sees ``hil_safety_stops_total`` before the service exits; a stop request ends the wait."""
        if self.metrics is None or summary.stopped_by not in SAFETY_STOP_REASONS:
            return
        end = time.monotonic() + self.cfg.metrics.linger_after_stop_s
        while time.monotonic() < end and not self.status.stop_request:
            self.metrics.check()
            time.sleep(0.05)

    def close(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            self.status.stop_request = 1.0
            self.proc.join(30.0)
        if self.metrics is not None:
            self.metrics.close()
            self.metrics = None
        if self.view is not None:
            self.view.close()
            self.view = None


def supervise(config_path: str, duration, record, on_poll=None, notify: bool = False, port_file=None,
              plant_type=None, view: ViewOptions | None = None) -> dict:
    """Run the real-time process to completion; returns its summary dict (``ok`` False on errors)."""
    run = ServiceRun(config_path, duration, record, port_file, plant_type, view)
    status = run.status
    notifier = Notifier() if notify else None

    def _stop(*_):
        if not status.stop_request and notifier is not None:
            notifier.send("STOPPING=1")
        status.stop_request = 1.0

    old = {sig: signal.signal(sig, _stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    ready = False
    last_ticks, last_ping = -1.0, 0.0
    try:
        try:
            run.start()
        except Exception as exc:       # the exporter or the view could not listen, or a process could not start
            return RunResult.failed(exc, traceback.format_exc())
        while run.alive():
            running = status.state == service.STATE_RUNNING
            if notifier is not None and running:
                if not ready:
                    notifier.send("READY=1")
                    ready = True
                now = time.monotonic()
                if (notifier.watchdog_s and not status.stop_request and now - last_ping >= notifier.watchdog_s
                        and status.ticks > last_ticks):              # no pings once STOPPING=1 went out
                    notifier.send("WATCHDOG=1")
                    last_ping, last_ticks = now, status.ticks
            if on_poll is not None:
                on_poll(status)
        summary = run.result()
        run.linger_after_safety_stop(summary)
        return summary
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        if notifier is not None:
            notifier.close()
        run.close()
        if port_file is not None and (run.proc is None or not run.proc.is_alive()):   # the ports are gone
            with contextlib.suppress(OSError):
                os.unlink(port_file)
