"""The real-time process of ``hil run`` / ``hil serve``: build the run, start the recorder, run the loop,
watch the helpers between ticks, and report a summary to the supervisor.

Health checks (with the loop's progress call, every 100 ms between ticks, in the loop's slack;
:class:`HealthCheck`):

- **parent**: the supervisor is gone (PR_SET_PDEATHSIG sends SIGTERM; ``getppid`` is the backstop):
  the loop stops with stimulation off, every helper is stopped, shared memory is unlinked and the port
  file removed. A loop stuck in a controller cannot do this: the supervisor's orphan watch
  (:mod:`hil.service.orphan_watch`) then kills this process, its link processes die with it (their
  PR_SET_PDEATHSIG is SIGKILL), and the recorder closes the file.
- **drivers**: a link process that died is noticed here; its driver reports it at the next fetch, the
  tick engine sets what that driver latched to zero (logged, so replay repeats it), and the summary
  names it.
- **recorder**: a recorder that died or reported a write failure is noticed here; the run then stops
  (``[recording] on_failure = "stop"``, the default) or goes on unrecorded (``"continue"``); either way
  the records not written are counted and the run ends with exit status 5.
"""
from __future__ import annotations

import contextlib
import math
import os
import signal
import time
import traceback
from dataclasses import dataclass

from drivers.core.contract import COMMAND_DTYPE, REJECT_REASONS
from drivers.ipc.link import LinkDriver
from drivers.ipc.process import die_with_parent, poll_report, start_helper, stop_process
from drivers.ipc.shm_ring import ShmRing
from hil.config import ConfigOverrides, load_service_config
from hil.recording.hilrec import AUX_WRITTEN, RecorderSpec, dtype_descr, run_recorder
from hil.rt.loop import RealtimeLoop
from hil.rt.stimulation import fatigue_channel_names
from hil.rt.tick import RecordingListener, TickBody, driver_streams
from hil.safety.table import StopReason
from hil.service import build as service
from hil.service.run_result import RunResult
from hil.service.warmup_progress import reporting_compilation
from hil.telemetry.counters import RunCounters
from hil.telemetry.metrics import LoopMetrics, MetricsBlock, MetricsSchema, default_schema


@dataclass(frozen=True)
class RtSpec:
    """What the supervisor hands the real-time process (picklable)."""
    config_path: str
    duration_s: float | None
    record_path: str | None = None
    port_file: str | None = None
    metrics_shm: str | None = None      # the supervisor's metrics block (None: metrics off)
    parent_pid: int | None = None       # None: the process that calls rt_main's parent
    overrides: ConfigOverrides = ConfigOverrides()   # ``hil run --plant``, ``--patient``
    listeners: tuple = ()               # picklable factories of extra tick listeners, called with the config
                                        # (the live view's writer): each has close(orphaned)
    metrics_address: str | None = None  # host:port of the exporter, announced in the port file


class Recording:
    """The recording rings and the recorder process, with what the recorder did not write."""

    def __init__(self, path: str, header: dict, tick_dtype, ctx, on_failure: str,
                 driver_streams: dict | None = None, status_values=None) -> None:
        """``status_values``: the run's status block (:class:`hil.service.build.RunStatus`), whose stall field the
        recorder reads at its end."""
        self.path, self.on_failure = path, on_failure
        self.rings = {"ticks": ShmRing.create(tick_dtype, 4096), "commands": ShmRing.create(COMMAND_DTYPE, 1 << 16)}
        for name, dtype in (driver_streams or {}).items():      # popped after the ticks: see hil.recording.hilrec
            self.rings[name] = ShmRing.create(dtype, 4096)
        self.failure = ""           # why the recorder stopped early ('' while it works)
        self.failed_at_tick = None
        self.finished = False
        spec = RecorderSpec(path=path, header=header,
                            rings={n: (r.name, dtype_descr(r.dtype), r.capacity) for n, r in self.rings.items()})
        try:
            fields = service.RunStatus.FIELDS
            stall_cell = None if status_values is None else (status_values, fields.index("stall_s"),
                                                             fields.index("stall_tick"))
            self.proc, _, self.pipe = start_helper(ctx, run_recorder, (spec, os.getpid(), stall_cell), "hil-recorder",
                                                   "the recorder process", daemon=False)
        except BaseException:
            self.release()
            raise

    def check(self, tick: int) -> bool:
        """Between ticks: False (once) when the recorder has just been found dead or failing."""
        if self.failure:
            return True
        report = poll_report(self.pipe)
        if report is None and self.proc.is_alive():
            return True
        self.failure, self.failed_at_tick = report or self._died(), tick
        return False

    def _died(self) -> str:
        return f"the recorder process died (exit code {self.proc.exitcode})"

    def unwritten(self) -> dict[str, int]:
        """Records pushed (or dropped when a ring was full) that are not in the file."""
        if self.failure:
            return {n: r.offered - int(r.aux[AUX_WRITTEN]) for n, r in self.rings.items()}
        return {n: r.dropped for n, r in self.rings.items()}

    def finish(self, timeout_s: float = 30.0) -> dict[str, int]:
        """Close the rings, let the recorder drain them, and count what did not reach the file."""
        self.finished = True
        for r in self.rings.values():
            r.close()
        stop_process(self.proc, timeout_s)
        report = poll_report(self.pipe)
        if not self.failure and (report or self.proc.exitcode):
            self.failure = report or self._died()
        self.pipe.close()
        return self.unwritten()

    def release(self) -> None:
        for r in self.rings.values():
            r.release()
        self.rings = {}


class HealthCheck:
    """Between ticks, with the loop's progress call: parent, drivers and recorder (see the module
    docstring); also copies the loop's figures into the supervisor's status block."""

    def __init__(self, run: "RealtimeRun", loop, status) -> None:
        self.run, self.loop, self.status = run, loop, status
        self.announced: set[int] = set()     # drivers whose death was said on stderr

    def __call__(self, tick: int) -> None:
        run, status, engine = self.run, self.status, self.run.engine
        status.ticks = tick
        status.gh_stability = engine.plant.outputs.gh_stability
        status.elbow_deg = math.degrees(engine.elbow_flexion_rad)
        status.watchdog_trips = engine.watchdog.trips
        if status.stop_request:
            self.loop.request_stop(StopReason.TICK_STALL if status.stall_s else StopReason.SIGNAL)
        if run.orphaned():
            self.loop.request_stop(StopReason.PARENT_DIED)
        for d in run.drivers:
            if not d.check_alive() and d.index not in self.announced:
                self.announced.add(d.index)
                service.say(f"driver {d.index}:{d.name}: its link process died; its stimulation is set to zero")
        rec = run.recording
        if rec is not None and not rec.check(tick):
            stop = rec.on_failure == "stop"
            service.say(f"recording {rec.path} failed at tick {tick}: {rec.failure}; "
                 + ("stopping the run" if stop else "the run goes on unrecorded (on_failure = continue)"))
            if stop:
                self.loop.request_stop(StopReason.RECORDING_FAILED)
        if rec is not None:
            run.publish_unwritten(rec.unwritten())


class RealtimeRun:
    """Everything the real-time process owns for one run, built in order and released in reverse."""

    def __init__(self, spec: RtSpec, status) -> None:
        self.spec, self.status = spec, status
        self.parent_pid = spec.parent_pid or os.getppid()
        self.drivers, self.recording, self.metrics, self.block = [], None, None, None
        self.extra_listeners = []            # from the spec's listener factories (the live view's writer)
        self.engine = self.model = self.cfg = self.loop = None
        self.stop_before_start = False      # SIGTERM during warm-up
        self.ports_written = False

    def orphaned(self) -> bool:
        return os.getppid() != self.parent_pid

    def request_stop(self, *_) -> None:
        """SIGTERM (from the supervisor, the whole process group, or PR_SET_PDEATHSIG when the supervisor died)."""
        reason = (StopReason.PARENT_DIED if self.orphaned() else StopReason.TICK_STALL if self.status.stall_s
                  else StopReason.SIGNAL)
        if self.loop is None:
            self.stop_before_start = True
        else:
            self.loop.request_stop(reason)

    def build(self) -> None:
        import multiprocessing as mp

        self.status.state = service.STATE_WARMING
        self.cfg = cfg = self.spec.overrides.apply(load_service_config(self.spec.config_path))
        self.n_ticks = service.ticks_for(self.spec.duration_s, cfg.loop.period_s)
        counters = self._counters()
        with reporting_compilation(cfg.plant.type, self.status):
            self.model, self.engine, self.drivers = service.build_engine(cfg, counters)
            self.engine.warmup()
        body = TickBody(self.engine, self.drivers)
        if self.block is not None:
            self.metrics = LoopMetrics(self.block, counters.driver_names, cfg.loop.period_s, self.drivers,
                                       fatigue_channel_names(cfg.stimulation))
            body.listeners.append(self.metrics)
        for factory in self.spec.listeners:
            self.extra_listeners.append(factory(cfg))
            body.listeners.append(self.extra_listeners[-1])
        if self.spec.record_path:
            streams = driver_streams(self.drivers)
            self.recording = Recording(self.spec.record_path, service.recording_header(cfg, self.model, self.engine),
                                       body.record.dtype, mp.get_context("spawn"), cfg.recording.on_failure,
                                       {name: dtype for name, (_, dtype) in streams.items()}, self.status.values)
            rings = self.recording.rings
            body.listeners.insert(0, RecordingListener(rings["ticks"], rings["commands"],
                                                       [(rings[name], d, name) for name, (d, _) in streams.items()]))
        self.loop = RealtimeLoop(body, cfg.loop, metrics=self.metrics, stall_timeout_s=cfg.safety.tick_stall_timeout_s,
                                 ticks_cell=self.status.cell("ticks"))

    def _ticking(self) -> None:
        """The loop is set up and about to tick: from here the supervisor's stall watch, the orphan watch and
        systemd's READY=1 and watchdog count ticks (STATE_RUNNING)."""
        self.status.state = service.STATE_RUNNING

    def _counters(self) -> RunCounters:
        """The run's counters: in the supervisor's metrics block when metrics are on (so the exporter serves
        them as they change), else in a private one."""
        names = service.driver_names(self.cfg)
        if not self.spec.metrics_shm:
            return RunCounters.private(names)
        schema = MetricsSchema(default_schema(names, list(REJECT_REASONS), fatigue_channel_names(self.cfg.stimulation)))
        self.block = MetricsBlock.attach(self.spec.metrics_shm, schema)
        return RunCounters(self.block, names)

    def run(self) -> RunResult:
        """Announce the ports, run the loop, finish the recording; the run's result."""
        if self.stop_before_start:
            raise RunAborted("stopped by a signal during warm-up")
        service.announce_ports(self.drivers, self.spec.port_file, self.spec.metrics_address)
        self.ports_written = bool(self.spec.port_file)
        health = HealthCheck(self, self.loop, self.status)
        cpu0, wall0 = time.process_time(), time.monotonic()
        summary = self.loop.run(self.n_ticks, progress=health, on_start=self._ticking)
        self.status.state = service.STATE_FINISHING     # no more ticks: not a stall
        if summary.stall_s and not self.status.stall_s:   # the loop found the stall first: the recording says so
            self.status.stall_s, self.status.stall_tick = summary.stall_s, summary.ticks - 1
        cpu_s, wall_s = time.process_time() - cpu0, time.monotonic() - wall0
        self.status.ticks, self.status.deadline_misses = summary.ticks, summary.deadline_misses
        self.status.max_lateness_s = summary.max_lateness_s
        driver_stats, lost = {}, []
        for d in self.drivers:      # every link learns at once that the loop has ended (it did not stall)
            if isinstance(d, LinkDriver):
                d.end_feed()
        for d in self.drivers:      # links stop before the recording closes: nothing more comes in
            if not d.check_alive():
                lost.append(f"{d.index}:{d.name}")
            driver_stats[f"{d.index}:{d.name}"] = d.stats
            d.shutdown()
        unwritten = self.recording.finish() if self.recording is not None else {}
        self.publish_unwritten(unwritten)
        return service.run_summary(self, summary, driver_stats, lost, unwritten, cpu_s, wall_s)

    def publish_unwritten(self, unwritten: dict[str, int]) -> None:
        """Records the recorder did not write, by stream, into ``hil_records_unwritten_total``."""
        if self.metrics is not None:
            by_label = {"ticks": 0, "commands": 0, "drivers": 0}
            for name, n in unwritten.items():
                by_label[name if name in by_label else "drivers"] += n
            for label, n in by_label.items():
                self.metrics.unwritten[label].set(n)

    def close(self) -> None:
        """Stop and release everything (idempotent; also after errors and when orphaned)."""
        for d in self.drivers:
            d.shutdown()
        for listener in self.extra_listeners:
            listener.close(self.orphaned())     # its views into the blocks go before the blocks
        self.extra_listeners = []
        if self.recording is not None:
            if not self.recording.finished:
                self.recording.finish(5.0 if self.orphaned() else 30.0)
            self.recording.release()
            self.recording = None
        if self.block is not None:
            self.block.owner = self.block.owner or self.orphaned()   # nobody else is left to unlink it
            self.block.release()
            self.block = None
        if self.ports_written and self.orphaned():
            with contextlib.suppress(OSError):
                os.unlink(self.spec.port_file)


class RunAborted(Exception):
    """The run was stopped before its loop started."""


def rt_main(spec: RtSpec, status, result_queue) -> None:
    """Target of the real-time process: build, warm up, run, put the :class:`RunResult` on the queue."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor decides when to stop
    run = RealtimeRun(spec, status)
    signal.signal(signal.SIGTERM, run.request_stop)
    if not die_with_parent(run.parent_pid, name="hil-rt"):
        return
    try:
        run.build()
        result = run.run()
        status.state = service.STATE_DONE
    except Exception as exc:  # reported to the supervisor, which prints it and sets the exit code
        status.state = service.STATE_FAILED
        result = RunResult.failed(exc, traceback.format_exc())
    finally:
        run.close()
    if not run.orphaned():
        result_queue.put(result)
