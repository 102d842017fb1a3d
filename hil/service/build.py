"""Building a run from a service config, and what the processes of ``hil run`` / ``hil serve`` share.

Processes (all started with the ``spawn`` method: nothing is forked from a process with threads):

- **supervisor** (the CLI process, :mod:`hil.service.supervisor`): validates the config, owns the metrics block
  and its exporter process (restarted if it dies), starts the real-time process, renders the progress
  display from a small shared status block, forwards SIGINT/SIGTERM, talks to systemd; never runs
  inside a tick, so rendering cannot steal the GIL from the loop.
- **real-time process** (:mod:`hil.service.rt_process`): builds the model, plant, stimulation model, safety
  functions and drivers, warms up the numba kernels, starts the recorder, then runs
  :class:`hil.rt.loop.RealtimeLoop`. It is the only Python thread of its process during the run.
- **exporter**, **recorder**, **link** and, with ``--view``, **view** (:mod:`hil.view`) processes fed
  through shared memory (metrics block, record rings, link rings, the view's status block). Every helper
  stops itself when its parent dies (PR_SET_PDEATHSIG and a parent check).
"""
from __future__ import annotations

import math

import numpy as np

from drivers.core.contract import REJECT_REASONS
from drivers.core.interface import DriverContext, DriverInitializationError, driver_class
from hil import __version__
from hil.config import MAX_RUN_DURATION_S, ServiceConfig
from hil.recording.files import load_model_state
from hil.rt.engine import TickEngine
from hil.rt.loop import tick_timing_us
from hil.rt.plants import config_file, plant_type
from hil.rt.sensor import SensorModel
from hil.rt.stimulation import StimulationModel, load_stimulation_config
from hil.rt.voluntary import VoluntaryLatch, driver_role, without_role
from hil.service.run_result import RunResult
from hil.telemetry.counters import RunCounters
from sim.das3.muscle_groups import group_members
from sim.output_file import write_output_text


def muscle_groups(muscle_names) -> dict[str, np.ndarray]:
    """Group name (the letters before the element number, e.g. ``deltclav``) -> element indices."""
    return {g: np.array(v, dtype=np.int64) for g, v in group_members(muscle_names).items()}


def build_engine(cfg: ServiceConfig, counters=None):
    """(model, engine, drivers) for a config, drivers open; raises ConfigError/ValueError on inconsistent
    settings. ``counters``: where the engine counts (:class:`hil.telemetry.counters.RunCounters`; default private)."""
    model, engine = build_tick_engine(cfg, counters)
    drivers = open_drivers(cfg, model, engine)
    engine.size_log(drivers)
    return model, engine, drivers


def build_plant(cfg: ServiceConfig):
    """(model, plant) of ``[plant] type`` (:mod:`hil.rt.plants`), with the step period / substeps."""
    kind = plant_type(cfg.plant.type)
    model = kind.load_model(cfg)
    return model, kind.make_plant(model, cfg, cfg.loop.period_s / cfg.loop.substeps, _initial_state(cfg, model))


def _initial_state(cfg: ServiceConfig, model):
    """``[plant] initial``: None for the model's own resting state, else the state file's values."""
    if cfg.plant.initial == "equilibrium":
        return None
    return load_model_state(config_file(cfg, cfg.plant.initial), model)


def build_tick_engine(cfg: ServiceConfig, counters=None):
    """(model, engine) for a config: plant, stimulation model, safety and sensor model; opens nothing."""
    model, plant = build_plant(cfg)
    stim_cfg = load_stimulation_config(cfg.stimulation, model.muscle_names, file=cfg.path)
    stimulation = None if stim_cfg.mode == "direct" else StimulationModel(stim_cfg, model.muscle_names, cfg.path)
    engine = TickEngine(plant, stimulation, cfg.safety, SensorModel(cfg.sensor, n_channels=0 if stimulation is None else stimulation.n_channels), cfg.loop.period_s,
                        cfg.loop.substeps, REJECT_REASONS, muscle_groups(model.muscle_names),
                        counters=counters if counters is not None else RunCounters.private(driver_names(cfg) or None),
                        voluntary=voluntary_latch(cfg, model))
    return model, engine


def voluntary_latch(cfg: ServiceConfig, model) -> VoluntaryLatch:
    """The run's voluntary drive (:mod:`hil.rt.voluntary`): its drivers (``role = "voluntary"``) and how much of
    each element the patient's own drive reaches (the model's ``voluntary_reach``)."""
    drivers = frozenset(i for i, d in enumerate(cfg.drivers) if driver_role(d) == "voluntary")
    return VoluntaryLatch(drivers, model.voluntary_reach(cfg.patient))


def driver_context(cfg: ServiceConfig, model, engine, index: int) -> DriverContext:
    """What driver ``index`` may know of the run (``drivers.core.interface`` rule 6)."""
    return DriverContext(
        index=index, file=cfg.path, base_dir=cfg.base_dir, period_s=cfg.loop.period_s,
        dof_names=tuple(model.dof_names), muscle_names=tuple(model.muscle_names), group_names=tuple(engine.groups),
        channel_names=tuple(c.name for c in engine.stim.channels) if engine.stim is not None else (),
        frame_dtype=engine.sensor.dtype, unmodelled_fields=plant_type(cfg.plant.type).unmodelled_fields,
        loop_sched_fifo=cfg.loop.sched_fifo, loop_priority=cfg.loop.priority, loop_cpu=cfg.loop.cpu,
        role=driver_role(cfg.drivers[index]))


def parse_drivers(cfg: ServiceConfig, model, engine) -> list[tuple[type, object, DriverContext]]:
    """(driver class, spec, context) of every ``[[driver]]`` table, validated; opens nothing."""
    parsed = []
    for i, table in enumerate(cfg.drivers):
        cls = driver_class(table["type"])
        ctx = driver_context(cfg, model, engine, i)
        parsed.append((cls, cls.parse_config(without_role(table), ctx), ctx))
    return parsed


def open_drivers(cfg: ServiceConfig, model, engine) -> list:
    """The config's drivers, opened (link processes started, buses and ptys opened)."""
    drivers = []
    try:
        for cls, spec, ctx in parse_drivers(cfg, model, engine):
            try:
                drivers.append(cls.open(spec, ctx))
            except DriverInitializationError as exc:   # say which driver of which file
                raise DriverInitializationError(f"{cfg.path}, {ctx.key} ({cls.name}): {exc}") from None
    except BaseException:   # a later driver failed: stop the link processes the earlier ones started
        for d in drivers:
            d.shutdown()
        raise
    return drivers


def ticks_for(duration_s: float | None, period_s: float) -> int | None:
    """Ticks of a run of ``duration_s`` (None: until stopped); at most MAX_RUN_DURATION_S, so the count
    stays an ordinary integer."""
    if duration_s is None:
        return None
    if not (math.isfinite(duration_s) and 0 < duration_s <= MAX_RUN_DURATION_S):
        raise ValueError(f"duration must be a number in (0, {MAX_RUN_DURATION_S:g}] s (30 days), not {duration_s!r}")
    return max(1, int(round(duration_s / period_s)))


# ----------------------------------------------------------------------------------------------
# The real-time process and its supervisor

STATE_STARTING, STATE_WARMING, STATE_RUNNING, STATE_DONE, STATE_FAILED = 0.0, 1.0, 2.0, 3.0, 4.0
STATE_FINISHING = 5.0
"""The loop has ended; the real-time process stops its helpers and closes the recording (no ticks expected)."""


def _status_field(i: int, doc: str) -> property:
    return property(lambda self: self.values[i], lambda self, v: self.values.__setitem__(i, v), doc=doc)


class RunStatus:
    """The small block the real-time process writes and the supervisor reads while a run lasts: named
    fields over one shared float64 array (a ``multiprocessing`` shared array, passed at spawn)."""

    FIELDS = ("ticks", "deadline_misses", "max_lateness_s", "gh_stability", "elbow_deg", "state", "stop_request",
              "watchdog_trips", "stall_s", "kernels_compiled", "kernels_total", "stall_tick")
    ticks = _status_field(0, "ticks run so far")
    deadline_misses = _status_field(1, "ticks that overran (at the end of the run)")
    max_lateness_s = _status_field(2, "largest tick lateness (at the end of the run)")
    gh_stability = _status_field(3, "GH stability value of the newest frame")
    elbow_deg = _status_field(4, "elbow flexion of the newest frame, degrees (for the progress display)")
    state = _status_field(5, "STATE_STARTING ... STATE_FAILED")
    stop_request = _status_field(6, "set by the supervisor: end the run after the current tick")
    watchdog_trips = _status_field(7, "controller watchdog trips so far")
    stall_s = _status_field(8, "set by the supervisor: how long the loop has not ticked (0: no stall declared)")
    kernels_compiled = _status_field(9, "numba kernels compiled so far in the warm-up (none when all were cached)")
    kernels_total = _status_field(10, "numba kernels the warm-up may compile (0 until it compiles one)")
    stall_tick = _status_field(11, "the tick in which the loop stalled (set with stall_s)")

    def __init__(self, values) -> None:
        self.values = values

    def cell(self, name: str) -> np.ndarray:
        """The field ``name`` as a one-element array over the shared block (written without a property call)."""
        i = self.FIELDS.index(name)
        return np.frombuffer(self.values, np.float64)[i:i + 1]

    @classmethod
    def create(cls, ctx) -> "RunStatus":
        return cls(ctx.Array("d", len(cls.FIELDS), lock=False))



def recording_header(cfg: ServiceConfig, model, engine) -> dict:
    """Everything a replay or an analysis needs besides the records."""
    import datetime

    return {
        "software": f"fes-hil {__version__}", "config_path": cfg.path, "config": cfg.raw,
        "model_data_sha256": model.data_sha256,
        "start_time_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "period_s": cfg.loop.period_s, "substeps": cfg.loop.substeps,
        "dof_names": list(model.dof_names), "muscle_names": list(model.muscle_names),
        "channel_names": [] if engine.stim is None else [c.name for c in engine.stim.channels],
        "reject_reasons": list(REJECT_REASONS),
        **session_entry(engine),
    }


def session_entry(engine) -> dict:
    """``{"stimulation_session": seed, CV and each channel's threshold factor}`` when the run draws its
    thresholds (:meth:`hil.rt.stimulation.StimulationConfig.session_header`), else nothing."""
    session = None if engine.stim is None else engine.stim.config.session_header()
    return {} if session is None else {"stimulation_session": session}


def announce_ports(drivers, port_file: str | None, metrics_address: str | None = None) -> dict:
    """Print where controllers connect and write it (JSON, atomically) to ``port_file`` when given, with
    the metrics exporter's ``host:port`` under ``"metrics"`` (its line is the supervisor's)."""
    import sys
    ports = {f"{d.index}:{d.name}": dict(d.ports) for d in drivers if d.ports}
    for name, p in ports.items():
        for role, where in p.items():
            print(f"hil: driver {name} {role} at {where}", file=sys.stderr, flush=True)
    if metrics_address:
        ports["metrics"] = {"exporter": metrics_address}
    if port_file:
        write_port_file(ports, port_file)
    return ports


def write_port_file(ports: dict, port_file: str) -> None:
    """``ports`` as JSON in ``port_file``, atomically (a reader never sees a half-written file; a failed write
    leaves none: :mod:`sim.output_file`)."""
    import json
    write_output_text(port_file, json.dumps(ports, indent=1))


def say(message: str) -> None:
    """One plain line on stderr (the supervisor's and the real-time process's notices of rare events)."""
    import sys
    print(f"hil: {message}", file=sys.stderr, flush=True)


def driver_names(cfg: ServiceConfig) -> list[str]:
    """``index:type`` of each driver: the label of its metrics series and summary entries."""
    return [f"{i}:{d['type']}" for i, d in enumerate(cfg.drivers)]


def run_summary(run, summary, driver_stats: dict, lost_drivers: list[str], unwritten: dict[str, int],
                cpu_s: float, wall_s: float) -> RunResult:
    """The result of a finished run (``problems``: one line each for the operator; exit 5)."""
    engine, rec = run.engine, run.recording
    lat = None if summary.timing_s is None else summary.timing_s[:, 0]
    return RunResult(
        ok=True, ticks=summary.ticks, stopped_by=summary.stopped_by, stop_detail=engine.stop_detail,
        deadline_misses=summary.deadline_misses, skipped_deadlines=summary.skipped_deadlines,
        late_over_1ms=0 if lat is None else int(np.count_nonzero(lat > 1e-3)), cpu_s=cpu_s, wall_s=wall_s,
        **tick_timing_us(summary.timing_s),
        realtime={"sched_fifo": summary.realtime.sched_fifo, "mlock": summary.realtime.mlock,
                  "affinity": summary.realtime.affinity, "warnings": summary.realtime.warnings},
        safety_counts=engine.safety.counts(), clipped_excitations=engine.plant.clipped_total,
        commands_received=sum(engine.received.values()),
        commands_rejected={f"{d}:{r}": n for (d, r), n in engine.rejected.items()},
        commands_clamped={f"{d}:{r}": n for (d, r), n in engine.clamped.items()},
        commands_unrecorded=summary.commands_unrecorded,
        final_elbow_deg=math.degrees(engine.elbow_flexion_rad),
        drivers=driver_stats, drivers_lost=lost_drivers, recording=None if rec is None else rec.path,
        recording_failure="" if rec is None else rec.failure,
        records_dropped={n: r.dropped for n, r in ({} if rec is None else rec.rings).items()},
        records_unwritten=unwritten, problems=run_problems(rec, lost_drivers, unwritten, summary.commands_unrecorded),
        stalls=[{"tick": summary.ticks - 1, "duration_s": round(summary.stall_s, 3), "killed": False}]
        if summary.stall_s else [])


def run_problems(rec, lost_drivers: list[str], unwritten: dict[str, int], commands_unrecorded: int) -> list[str]:
    """What makes a finished run incomplete, one line each: lost drivers, a recording that lacks records."""
    problems = [f"driver {name}: its link process died during the run; its stimulation was set to zero"
                for name in lost_drivers]
    counts = f"{unwritten.get('ticks', 0)} tick records, {unwritten.get('commands', 0)} command records"
    if rec is not None and rec.failure:
        problems.append(f"recording {rec.path} is incomplete: {rec.failure} at tick {rec.failed_at_tick}; "
                        f"not written: {counts}")
    elif any(unwritten.values()):
        problems.append(f"recording {rec.path} is incomplete: the recording rings overflowed; not written: {counts}")
    if commands_unrecorded:
        problems.append(f"{commands_unrecorded} command-log entries were not recorded")
    return problems
