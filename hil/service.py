"""Building a run from a service config, and the process architecture of ``hil run`` / ``hil serve``.

Processes (all started with the ``spawn`` method: nothing is forked from a process with threads):

- **supervisor** (the CLI process): validates the config, starts the others, renders the progress
  display from a small shared status block, forwards SIGINT/SIGTERM, talks to systemd; never runs
  inside a tick, so rendering cannot steal the GIL from the loop.
- **real-time process**: builds the model, plant, stimulation model, safety functions and drivers,
  warms up the numba kernels, then runs :class:`hil.loop.RealtimeLoop`. It is the only Python thread
  of its process during the run.
- **exporter** and **recorder** processes fed through shared memory (metrics block, record rings).
"""
from __future__ import annotations

import math
import os
import time

import numpy as np

from drivers.base import REJECT_REASONS, DriverInitializationError, driver_class
from drivers.loopback import LoopbackDriver, make_controller
from hil.config import ServiceConfig
from hil.engine import TickEngine
from hil.files import load_state_file
from hil.sensor import SensorModel
from sim.model import load_model
from sim.plant import Plant


def muscle_groups(muscle_names) -> dict[str, np.ndarray]:
    """Group name (the letters before the element number, e.g. ``deltclav``) -> element indices."""
    groups: dict[str, list[int]] = {}
    for i, name in enumerate(muscle_names):
        groups.setdefault(name.rstrip("0123456789"), []).append(i)
    return {g: np.array(v, dtype=np.int64) for g, v in groups.items()}


def build_engine(cfg: ServiceConfig):
    """(model, engine, drivers) for a config; raises ConfigError/ValueError on inconsistent settings."""
    model = load_model(cfg.model)
    step = cfg.loop.period_s / cfg.loop.substeps
    x0 = None if cfg.plant.initial == "equilibrium" else load_state_file(
        cfg.plant.initial if os.path.isabs(cfg.plant.initial) else os.path.join(cfg.base_dir, cfg.plant.initial),
        model.n_states)
    plant = Plant(model, step_s=step, initial_state=x0, scheme=cfg.plant.scheme)
    from hil.stimulation import StimulationModel, load_stimulation_config
    stim_cfg = load_stimulation_config(cfg.stimulation, model.muscle_names, file=cfg.path)
    stimulation = None if stim_cfg.mode == "direct" else StimulationModel(stim_cfg, model.muscle_names, cfg.path)
    engine = TickEngine(plant, stimulation, cfg.safety, SensorModel(cfg.sensor), cfg.loop.period_s,
                        cfg.loop.substeps, REJECT_REASONS, muscle_groups(model.muscle_names))
    drivers = []
    try:
        for i, spec in enumerate(cfg.drivers):
            kind = spec["type"]
            if kind == "loopback":
                ctl = make_controller(spec, n_channels=engine.n_channels, muscle_names=model.muscle_names,
                                      period_s=cfg.loop.period_s, base_dir=cfg.base_dir, file=cfg.path, index=i)
                drivers.append(LoopbackDriver(ctl, cfg.loop.period_s, index=i))
            else:
                cls = driver_class(kind)
                try:
                    drivers.append(cls.from_config(spec, engine=engine, index=i, base_dir=cfg.base_dir,
                                                   file=cfg.path, loop=cfg.loop))
                except DriverInitializationError as exc:   # say which driver of which file
                    raise DriverInitializationError(f"{cfg.path}, driver[{i}] ({kind}): {exc}") from None
    except BaseException:   # a later driver failed: stop the link processes the earlier ones started
        for d in drivers:
            d.shutdown()
        raise
    return model, engine, drivers


def ticks_for(duration_s: float | None, period_s: float) -> int | None:
    if duration_s is None:
        return None
    if not (math.isfinite(duration_s) and duration_s > 0):
        raise ValueError(f"duration must be a finite number > 0 s, not {duration_s!r}")
    return max(1, int(round(duration_s / period_s)))


# ----------------------------------------------------------------------------------------------
# The real-time process and its supervisor

STATUS_FIELDS = ("ticks", "deadline_misses", "max_lateness_s", "gh_stability", "elbow_deg",
                 "state", "stop_request", "watchdog")
STATE_STARTING, STATE_WARMING, STATE_RUNNING, STATE_DONE, STATE_FAILED = 0.0, 1.0, 2.0, 3.0, 4.0
EXIT_OK, EXIT_ERROR, EXIT_CONFIG, EXIT_SAFETY_STOP = 0, 1, 2, 4


def _status_index(name: str) -> int:
    return STATUS_FIELDS.index(name)


def recording_header(cfg: ServiceConfig, model, engine) -> dict:
    """Everything a replay or an analysis needs besides the records."""
    import datetime

    from hil import __version__
    return {
        "software": f"fes-hil {__version__}", "config_path": cfg.path, "config": cfg.raw,
        "model_data_sha256": model.data_sha256,
        "start_time_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "period_s": cfg.loop.period_s, "substeps": cfg.loop.substeps,
        "dof_names": list(model.dof_names), "muscle_names": list(model.muscle_names),
        "channel_names": [] if engine.stim is None else [c.name for c in engine.stim.channels],
        "reject_reasons": list(REJECT_REASONS),
    }


def start_recording(path: str, header: dict, tick_dtype, ctx):
    """Rings for the tick records and the command log, and the recorder process draining them."""
    from drivers.base import COMMAND_DTYPE
    from hil.recording import RecorderSpec, run_recorder, _descr
    from hil.shm_ring import ShmRing

    rings = {"ticks": ShmRing.create(tick_dtype, 4096), "commands": ShmRing.create(COMMAND_DTYPE, 1 << 16)}
    spec = RecorderSpec(path=path, header=header,
                        rings={n: (r.name, _descr(r.dtype), r.capacity) for n, r in rings.items()})
    ready = ctx.Event()
    proc = ctx.Process(target=run_recorder, args=(spec, os.getpid(), ready), name="hil-recorder")
    proc.start()
    if not ready.wait(60.0):
        proc.terminate()
        raise RuntimeError(f"the recorder process did not start (exit code {proc.exitcode})")
    return rings, proc


def announce_ports(drivers, port_file: str | None) -> dict:
    """Print where controllers connect and write it (JSON, atomically) to ``port_file`` when given."""
    import sys
    ports = {f"{d.index}:{d.name}": dict(d.ports) for d in drivers if d.ports}
    for name, p in ports.items():
        for role, where in p.items():
            print(f"hil: driver {name} {role} at {where}", file=sys.stderr, flush=True)
    if port_file:
        write_port_file(ports, port_file)
    return ports


def write_port_file(ports: dict, port_file: str) -> None:
    """``ports`` as JSON in ``port_file``, atomically (a reader never sees a half-written file)."""
    import json
    tmp = f"{port_file}.tmp{os.getpid()}"
    with open(tmp, "w") as fh:
        json.dump(ports, fh, indent=1)
    os.replace(tmp, port_file)


def rt_main(config_path: str, duration_s, status, result_queue, record_path=None, port_file=None) -> None:
    """Target of the real-time process: build, warm up, run, report a summary dict on the queue."""
    import multiprocessing as mp
    import signal
    import traceback

    from hil.config import load_service_config
    from hil.loop import RealtimeLoop, Sinks

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor decides when to stop
    drivers = []
    rings, recorder, block, exporter = {}, None, None, None
    try:
        status[_status_index("state")] = STATE_WARMING
        cfg = load_service_config(config_path)
        model, engine, drivers = build_engine(cfg)
        engine.warmup()
        n_ticks = ticks_for(duration_s, cfg.loop.period_s)
        loop = RealtimeLoop(engine, drivers, cfg.loop)
        ctx = mp.get_context("spawn")
        sinks = Sinks()
        if cfg.metrics.enabled:     # before the recording: a busy port must not leave an empty recording
            from hil.metrics import LoopMetrics, MetricsBlock, MetricsSchema, default_schema, start_exporter
            names = [f"{i}:{d['type']}" for i, d in enumerate(cfg.drivers)]
            block = MetricsBlock.create(MetricsSchema(default_schema(names, list(REJECT_REASONS))))
            exporter = start_exporter(block, cfg.metrics.host, cfg.metrics.port, ctx)
            sinks.metrics = LoopMetrics(block, names, REJECT_REASONS, cfg.loop.period_s, drivers)
        if record_path:
            rings, recorder = start_recording(record_path, recording_header(cfg, model, engine),
                                              loop.record.dtype, ctx)
            sinks.tick_ring, sinks.command_ring = rings["ticks"], rings["commands"]
        loop.sinks = sinks
        i_ticks, i_miss, i_lat = _status_index("ticks"), _status_index("deadline_misses"), _status_index("max_lateness_s")
        i_gh, i_el, i_stop, i_wd = (_status_index("gh_stability"), _status_index("elbow_deg"),
                                    _status_index("stop_request"), _status_index("watchdog"))

        def progress(tick: int) -> None:
            status[i_ticks] = tick
            status[i_gh] = engine.plant.outputs.gh_stability
            status[i_el] = math.degrees(engine.plant.outputs.q[9])
            status[i_wd] = engine.watchdog.trips
            if status[i_stop]:
                loop.request_stop()

        signal.signal(signal.SIGTERM, lambda *_: loop.request_stop())
        announce_ports(drivers, port_file)      # announced when the loop is about to start: ready
        status[_status_index("state")] = STATE_RUNNING
        cpu0, wall0 = time.process_time(), time.monotonic()
        summary = loop.run(n_ticks, progress=progress)
        status[i_ticks] = summary.ticks
        status[i_miss] = summary.deadline_misses
        status[i_lat] = summary.max_lateness_s
        lat = summary.lateness_s
        result_queue.put({
            "ok": True, "ticks": summary.ticks, "stopped_by": summary.stopped_by, "stop_detail": engine.stop_detail,
            "deadline_misses": summary.deadline_misses, "skipped_deadlines": summary.skipped_deadlines,
            "late_over_1ms": 0 if lat is None else int(np.count_nonzero(lat > 1e-3)),
            "cpu_s": time.process_time() - cpu0, "wall_s": time.monotonic() - wall0,
            "lateness_us": {} if lat is None or not lat.size else {
                "p50": float(np.percentile(lat, 50) * 1e6), "p99": float(np.percentile(lat, 99) * 1e6),
                "p99.9": float(np.percentile(lat, 99.9) * 1e6), "max": float(lat.max() * 1e6)},
            "realtime": {"sched_fifo": summary.realtime.sched_fifo, "mlock": summary.realtime.mlock,
                         "affinity": summary.realtime.affinity, "warnings": summary.realtime.warnings},
            "watchdog_trips": engine.watchdog.trips, "gh_unstable_ticks": engine.gh.unstable_ticks,
            "rom_alarm_ticks": engine.rom.alarm_ticks, "clipped_excitations": engine.plant.clipped_total,
            "commands_received": sum(engine.received.values()),
            "commands_rejected": {f"{d}:{r}": n for (d, r), n in engine.rejected.items()},
            "commands_clamped": {f"{d}:{r}": n for (d, r), n in engine.clamped.items()},
            "final_elbow_deg": math.degrees(engine.plant.outputs.q[9]),
            "drivers": {f"{d.index}:{d.name}": d.stats for d in drivers},
            "recording": record_path, "records_dropped": {n: r.dropped for n, r in rings.items()},
        })
        status[_status_index("state")] = STATE_DONE
    except Exception as exc:  # reported to the supervisor, which prints it and sets the exit code
        status[_status_index("state")] = STATE_FAILED
        result_queue.put({"ok": False, "error": f"{type(exc).__name__}: {exc}",
                          "config_error": type(exc).__name__ in ("ConfigError", "ExcitationFileError", "StateFileError",
                                                                 "MetricsError", "DriverInitializationError"),
                          "traceback": traceback.format_exc()})
    finally:
        for d in drivers:
            d.shutdown()
        for r in rings.values():
            r.close()
        if recorder is not None:
            recorder.join(30.0)
        for r in rings.values():
            r.release()
        if exporter is not None:
            exporter.terminate()
            exporter.join(5.0)
        if block is not None:
            block.release()
