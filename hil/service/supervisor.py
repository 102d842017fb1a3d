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

from drivers.core.contract import REJECT_REASONS
from drivers.ipc.process import stop_process
from hil.config import ConfigOverrides, load_service_config
from hil.rt.stimulation import fatigue_channel_names
from hil.safety.production import TICK_STALL
from hil.safety.table import StopReason
from hil.service import build as service
from hil.service.orphan_watch import OrphanWatchSpec, run_orphan_watch
from hil.service.rt_process import RtSpec, rt_main
from hil.service.run_result import RunResult
from hil.telemetry.exporter import start_exporter
from hil.telemetry.metrics import MetricsBlock, MetricsSchema, default_schema
from hil.telemetry.metrics_port import MetricsPort, TargetFile, listen, port_holder, scrape_address


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

    def __init__(self, cfg, port) -> None:
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
        self.port = port                  # hil.telemetry.metrics_port.MetricsPort
        self.listener = self.address = self.target = None

    def start(self) -> None:
        if self.listener is None:     # bound once: every restart of the exporter serves on the same port
            self.listener = listen(self.cfg.host, self.port.port, not self.port.fixed, self.port.advice)
            self.address = scrape_address(self.listener)
        self.proc = start_exporter(self.block, self.cfg.host, self.port.port, mp.get_context("spawn"), self.listener)

    def announce(self) -> None:
        """Say where /metrics is (one line; why it is not the configured port) and write this run's
        Prometheus target file; a file that cannot be written is one more line, and the run goes on."""
        taken = self.port.port and not self.address.endswith(f":{self.port.port}")
        self.target = TargetFile(self.cfg.targets_directory, self.address)
        service.say(f"metrics at http://{self.address}/metrics"
                    + (f" (port {self.port.port} is taken by {port_holder(self.port.port)})" if taken else "")
                    + f"; Prometheus target file {self.target.path}")
        try:
            self.target.write()
        except OSError as exc:
            service.say(f"cannot write {self.target.path} ({exc.strerror or exc}): Prometheus's file_sd will not "
                        "find this run; set [metrics] targets_directory to a writable directory")

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
        if self.proc is not None:
            self.proc.terminate()
            stop_process(self.proc, 5.0)
        if self.target is not None:
            self.target.remove()
        if self.listener is not None:
            self.listener.close()
        self.block.release()

    def report(self, summary: RunResult) -> None:
        summary.exporter_restarts = int(self.restarts.value)
        summary.exporter_deaths = self.deaths
        if self.failures and summary.ok:
            summary.problems.append(f"metrics were not exported for part of the run: {len(self.failures)} "
                                       f"restart(s) of the exporter failed (last: {self.failures[-1]})")


class StallWatch:
    """The tick-progress watchdog, in the supervisor: a controller stuck in ``step()`` (in Python, or in C
    code that holds the GIL) stops the loop's own checks, never this process. While the loop runs, the tick
    count it reports after every tick must advance within ``[safety] tick_stall_timeout_ms``; when it does not,
    the stall is counted in the metrics and a stop is requested, and a real-time process that has not ended
    GRACE_S later is killed (SIGKILL): its link processes die with it, each transport goes quiet, and the
    recorder closes the file with a stall record (``drivers.core.contract.KIND_TICK_STALL``). A loop that has not
    honoured a stop request (SIGTERM) within GRACE_S has stalled too, whatever the timeout."""

    GRACE_S = 1.0

    def __init__(self, timeout_s: float, status, metrics: "MetricsHost | None") -> None:
        self.timeout_s, self.status, self.metrics = timeout_s, status, metrics
        self.last_ticks, self.last_change = -1.0, time.monotonic()
        self.declared = self.killed = False
        self.ended_at: float | None = None       # when the loop moved on again or its process was killed
        self.tick = 0                            # the tick in which the loop stalled
        self.kill_after_s = timeout_s + self.GRACE_S
        self.why = f"no tick within safety.tick_stall_timeout_ms = {timeout_s * 1e3:g}"

    @property
    def duration_s(self) -> float:
        return (self.ended_at or time.monotonic()) - self.last_change

    def poll(self, proc) -> None:
        """Between waits: declare a stall once ticks stopped for longer than the timeout; kill after the grace."""
        status, now = self.status, time.monotonic()
        if status.ticks != self.last_ticks or status.state != service.STATE_RUNNING:
            if self.declared and self.ended_at is None:
                self.ended_at = now
            if not self.declared:
                self.last_ticks, self.last_change = status.ticks, now
            return
        if self.ended_at is not None:
            return
        limit = min(self.timeout_s, self.GRACE_S) if status.stop_request else self.timeout_s
        if not self.declared and now - self.last_change > limit:       # a stop request is honoured within a tick
            self._declare()
            self.kill_after_s = limit + self.GRACE_S
            if limit < self.timeout_s:
                self.why = f"a stop request not honoured within {limit:g} s"
        if self.declared:
            status.stall_s = now - self.last_change
            if now - self.last_change > self.kill_after_s and proc.is_alive():
                proc.kill()
                self.killed, self.ended_at = True, now

    def _declare(self) -> None:
        self.declared, self.tick = True, int(self.status.ticks)     # ticks run = the index of the one running
        self.status.stall_tick = self.tick
        self.status.stall_s = time.monotonic() - self.last_change
        self.status.stop_request = 1.0
        self._count()

    def _count(self) -> None:
        if self.metrics is not None:
            stalls, stalled = TICK_STALL.series
            self.metrics.block.counter(stalls.name).inc()
            self.metrics.block.gauge(stalled.name).set(1.0)

    def report(self, summary: RunResult) -> RunResult:
        """A stalled run is a failed run (``ok`` False) whatever the real-time process reported; a tick the
        loop itself found too long (it returned before the stall was declared here) counts the same."""
        if self.declared:
            stall = {"tick": self.tick, "duration_s": round(self.duration_s, 3), "killed": self.killed}
        elif summary.stalls:
            stall = summary.stalls[0]
            self._count()
        else:
            return summary
        if self.killed and self.metrics is not None:
            self.metrics.block.gauge("hil_running").set(0.0)     # the loop could not say so itself
        ended = ("the real-time process did not recover and was killed" if stall["killed"]
                 else "the loop was stopped when it recovered")
        error = (f"the loop stalled in tick {stall['tick']} for {stall['duration_s']:.1f} s ({self.why}): "
                 f"stimulation stopped, {ended}")
        return dataclasses.replace(summary, ok=False, error=error, config_error=False, stopped_by=StopReason.TICK_STALL,
                                   stalls=[{**stall, "timeout_s": self.timeout_s}])


class ServiceRun:
    """The processes of one run, seen from the supervisor: the metrics exporter and the live view (here)
    and the real-time process (which starts the recorder and the links). ``poll`` between waits keeps the
    exporter and the view alive. ``view``: the live view as a companion the command line built
    (:class:`hil.view.host.ViewHost`): ``start(spec)`` returns a picklable factory of a tick listener the
    real-time process adds (called with the run's config), ``check()`` restarts it, ``close()`` ends it."""

    def __init__(self, config_path: str, duration, record=None, port_file=None,
                 overrides: ConfigOverrides = ConfigOverrides(), view=None, metrics_port=None) -> None:
        self.ctx = mp.get_context("spawn")
        self.status = service.RunStatus.create(self.ctx)
        self.results = self.ctx.Queue()
        self.cfg = overrides.apply(load_service_config(config_path))
        self.spec = RtSpec(str(config_path), duration, None if record is None else str(record),
                           None if port_file is None else str(port_file), None, os.getpid(), overrides)
        self.metrics_port = metrics_port or MetricsPort(self.cfg.metrics.port)   # default: hil run's choice
        self.metrics, self.view = None, view
        self.proc = self.orphan_watch = None

    def start(self) -> None:
        """Exporter and view first (a busy port fails before any warm-up or recording), then the real-time
        process."""
        if self.cfg.metrics.enabled:
            self.metrics = MetricsHost(self.cfg, self.metrics_port)
            try:
                self.metrics.start()
            except BaseException:
                self.metrics.close()
                self.metrics = None
                raise
            self.metrics.announce()
            self.spec = dataclasses.replace(self.spec, metrics_shm=self.metrics.block.shm.name,
                                            metrics_address=self.metrics.address)
        if self.view is not None:
            self._start_view()
        self.proc = self.ctx.Process(target=rt_main, name="hil-rt", args=(self.spec, self.status, self.results))
        self.proc.start()
        self._start_orphan_watch()

    def _start_orphan_watch(self) -> None:
        """The process that kills a stuck real-time process when this one dies (:mod:`hil.service.orphan_watch`)."""
        fields = service.RunStatus.FIELDS
        spec = OrphanWatchSpec(self.proc.pid, os.getpid(), self.status.values, fields.index("ticks"),
                               fields.index("state"), service.STATE_RUNNING, self.cfg.safety.tick_stall_timeout_s,
                               self.spec.port_file)
        self.orphan_watch = self.ctx.Process(target=run_orphan_watch, name="hil-orphanwatch", args=(spec,))
        self.orphan_watch.start()

    def _start_view(self) -> None:
        try:
            listener = self.view.start(self.spec)
        except BaseException:
            self.view.close()
            self.view = None
            raise
        self.spec = dataclasses.replace(self.spec, listeners=(*self.spec.listeners, listener))

    def alive(self, wait_s: float = 0.05) -> bool:
        """Wait up to ``wait_s`` for the real-time process; restart a dead exporter or view (not once a stop
        was requested: a SIGTERM to the whole process group ends them too, and that is no failure); whether
        it still runs."""
        self.proc.join(wait_s)
        if not self.status.stop_request:
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
        """After a safety rule's stop, keep ``/metrics`` up for ``[metrics] linger_after_stop_ms``, so that a
        scrape sees ``hil_safety_stops_total`` before the service exits; a stop request ends the wait."""
        if self.metrics is None or not summary.safety_stop:
            return
        end = time.monotonic() + self.cfg.metrics.linger_after_stop_s
        while time.monotonic() < end and not self.status.stop_request:
            self.metrics.check()
            time.sleep(0.05)

    def close(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            self.status.stop_request = 1.0
            self.proc.join(30.0)
            if self.proc.is_alive():        # stuck where no stop request reaches it
                self.proc.kill()
                self.proc.join(5.0)
        if self.orphan_watch is not None:   # it ends when the real-time process has
            stop_process(self.orphan_watch, 2.0)
        if self.metrics is not None:
            self.metrics.close()
            self.metrics = None
        if self.view is not None:
            self.view.close()
            self.view = None


def supervise(config_path: str, duration, record, on_poll=None, notify: bool = False, port_file=None,
              overrides: ConfigOverrides = ConfigOverrides(), view=None, metrics_port=None) -> dict:
    """Run the real-time process to completion; returns its summary dict (``ok`` False on errors).
    ``metrics_port``: a :class:`hil.telemetry.metrics_port.MetricsPort` (default: ``[metrics] port``, or any free port
    when it is taken)."""
    run = ServiceRun(config_path, duration, record, port_file, overrides, view, metrics_port)
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
        stall = StallWatch(run.cfg.safety.tick_stall_timeout_s, status, run.metrics)
        while run.alive():
            stall.poll(run.proc)
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
        summary = stall.report(run.result())
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
