"""Prometheus metrics without disturbing the loop: the series schema and their shared-memory values.

The real-time process only writes numbers into a float64 array in shared memory (:class:`MetricsBlock`;
an ``inc``/``set`` is one array store, ``observe`` a bisect and two stores); :class:`LoopMetrics` is what
the loop updates. A separate exporter process (:mod:`hil.telemetry.exporter`) attaches the block and serves
``/metrics``.

Names follow the conventions enforced by prometheus_client: counters are exposed with ``_total``,
times are ``_seconds``.
"""
from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from multiprocessing import shared_memory

import numpy as np

from drivers.ipc.shm_ring import close_shared_memory
from hil.safety import table
from sim.errors import UserInputError

_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
LATENCY_BUCKETS = (1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 2e-2, 5e-2)


class MetricsError(UserInputError):
    """The metrics exporter could not start (e.g. its address is in use)."""


@dataclass(frozen=True)
class MetricSpec:
    name: str
    kind: str                       # counter | gauge | histogram
    help: str
    labelnames: tuple[str, ...] = ()
    labelvalues: tuple[tuple[str, ...], ...] = ((),)
    buckets: tuple[float, ...] = ()


def default_schema(drivers: list[str], reasons: list[str], fatigue_channels=()) -> tuple[MetricSpec, ...]:
    """Every series of a run; ``fatigue_channels``: the stimulation channels with a fatigue state."""
    d = tuple((x,) for x in drivers) or (("none",),)
    fatigue = (MetricSpec("hil_fatigue_fitness", "gauge", "Fatigue fitness of a stimulation channel's muscles "
                          "(1 rested; hil.rt.fatigue).", ("channel",), tuple((c,) for c in fatigue_channels)),
               ) if fatigue_channels else ()
    dr = tuple((x, r) for x in drivers for r in reasons) or (("none", "none"),)
    return (
        MetricSpec("hil_tick_lateness_seconds", "histogram", "Tick start after its deadline.", buckets=LATENCY_BUCKETS),
        MetricSpec("hil_plant_step_seconds", "histogram", "Compute time of a tick's plant step(s), safety and sensors.",
                   buckets=LATENCY_BUCKETS),
        MetricSpec("hil_tick_period_seconds", "histogram", "Time between consecutive tick starts.",
                   buckets=(5e-4, 9e-4, 1e-3, 1.1e-3, 2e-3, 3.9e-3, 4e-3, 4.1e-3, 5e-3, 1e-2, 2e-2, 5e-2)),
        MetricSpec("hil_command_latency_seconds", "histogram", "Command receive to actuation (plant step).",
                   buckets=LATENCY_BUCKETS),
        MetricSpec("hil_ticks_total", "counter", "Ticks run."),
        MetricSpec("hil_deadline_misses_total", "counter", "Ticks that overran into the next period."),
        MetricSpec("hil_commands_received_total", "counter", "Valid commands latched.", ("driver",), d),
        MetricSpec("hil_commands_rejected_total", "counter", "Commands not applied, by reason.",
                   ("driver", "reason"), dr),
        MetricSpec("hil_commands_clamped_total", "counter", "Commands applied clamped to their limits, by reason.",
                   ("driver", "reason"), dr),
        *safety_specs(),
        MetricSpec("hil_safety_stops_total", "counter", "Runs ended by a GH or range-of-motion 'stop' safety action "
                   "(exit status 4); visible until the service exits."),
        MetricSpec("hil_excitation_clipped_total", "counter", "Excitations clipped to [0, 1] by the plant."),
        MetricSpec("hil_commands_unrecorded_total", "counter",
                   "Command-log entries that did not reach the recording (log or ring full)."),
        MetricSpec("hil_records_unwritten_total", "counter",
                   "Records the recorder did not write (ring full, recorder dead or write failed); stream "
                   "\"drivers\": the streams drivers add (controller state).",
                   ("stream",), (("ticks",), ("commands",), ("drivers",))),
        MetricSpec("hil_driver_failures_total", "counter", "Driver transports (link processes) that died.",
                   ("driver",), d),
        MetricSpec("hil_exporter_restarts_total", "counter", "Metrics exporter processes restarted after dying."),
        MetricSpec("hil_gh_stability", "gauge", "GH stability value (paper eq. 9): < 0 inside the glenoid."),
        MetricSpec("hil_realtime_factor", "gauge", "Simulated time / wall time of the run so far."),
        MetricSpec("hil_controller_connected", "gauge", "1 while the driver's controller is alive.", ("driver",), d),
        MetricSpec("hil_realtime_privileges", "gauge", "1 if SCHED_FIFO and mlockall were granted."),
        MetricSpec("hil_running", "gauge", "1 while the loop runs."),
    ) + fatigue


def safety_specs() -> tuple[MetricSpec, ...]:
    """The safety rules' series (:func:`hil.safety.table.metric_series`)."""
    return tuple(MetricSpec(s.name, s.kind, s.help) for s in table.metric_series())


class MetricsSchema:
    """Fixed layout of all series in one float64 array."""

    def __init__(self, specs) -> None:
        self.specs = tuple(specs)
        self.offsets: dict[tuple[str, tuple[str, ...]], int] = {}
        names = set()
        n = 0
        for s in self.specs:
            if not _NAME.match(s.name) or s.name in names:
                raise ValueError(f"invalid or duplicate metric name {s.name!r}")
            if s.kind == "counter" and not s.name.endswith("_total"):
                raise ValueError(f"counter {s.name!r} must end in _total")
            if s.kind == "histogram" and (not s.name.endswith("_seconds") or list(s.buckets) != sorted(s.buckets)):
                raise ValueError(f"histogram {s.name!r} must end in _seconds and have sorted buckets")
            if s.kind not in ("counter", "gauge", "histogram"):
                raise ValueError(f"unknown metric kind {s.kind!r}")
            names.add(s.name)
            for lv in s.labelvalues:
                if len(lv) != len(s.labelnames):
                    raise ValueError(f"{s.name}: label values {lv} do not match {s.labelnames}")
                self.offsets[(s.name, lv)] = n
                n += (len(s.buckets) + 3) if s.kind == "histogram" else 1  # buckets + +Inf, sum, count
        self.size = n


class MetricCell:
    """One counter or gauge value in a block: where the run keeps it (``value``), not a copy."""
    __slots__ = ("a", "i")

    def __init__(self, a, i):
        self.a, self.i = a, i

    def inc(self, n: float = 1.0) -> None:
        self.a[self.i] += n

    def set(self, v: float) -> None:
        self.a[self.i] = v

    @property
    def value(self) -> float:
        return float(self.a[self.i])


class _Histogram:
    __slots__ = ("a", "i", "bounds", "sum_i", "count_i")

    def __init__(self, a, i, bounds):
        self.a, self.i, self.bounds = a, i, list(bounds)
        self.sum_i, self.count_i = i + len(bounds) + 1, i + len(bounds) + 2

    def observe(self, v: float) -> None:
        self.a[self.i + bisect.bisect_left(self.bounds, v)] += 1.0
        self.a[self.sum_i] += v
        self.a[self.count_i] += 1.0


class MetricsBlock:
    """All series of a schema in one float64 array: in shared memory (served by the exporter) or, from
    :meth:`private`, in this process only (metrics off: the run's counters still live in one place)."""

    def __init__(self, schema: MetricsSchema, shm, owner: bool) -> None:
        self.schema, self.shm, self.owner = schema, shm, owner
        self.values = (np.zeros(max(1, schema.size)) if shm is None
                       else np.ndarray((schema.size,), dtype=np.float64, buffer=shm.buf))

    @classmethod
    def private(cls, schema: MetricsSchema) -> "MetricsBlock":
        return cls(schema, None, True)

    @classmethod
    def create(cls, schema: MetricsSchema) -> "MetricsBlock":
        block = cls(schema, shared_memory.SharedMemory(create=True, size=max(8, schema.size * 8)), True)
        block.values[:] = 0.0
        return block

    @classmethod
    def attach(cls, name: str, schema: MetricsSchema) -> "MetricsBlock":
        shm = shared_memory.SharedMemory(name=name)
        return cls(schema, shm, False)

    def _offset(self, name: str, labels: dict) -> tuple[MetricSpec, int]:
        spec = next((s for s in self.schema.specs if s.name == name), None)
        if spec is None:
            raise KeyError(f"unknown metric {name!r}")
        lv = tuple(str(labels[k]) for k in spec.labelnames) if set(labels) == set(spec.labelnames) else None
        if lv is None or (name, lv) not in self.schema.offsets:
            raise KeyError(f"{name}: no series with labels {labels}")
        return spec, self.schema.offsets[(name, lv)]

    def counter(self, name: str, **labels) -> MetricCell:
        return MetricCell(self.values, self._offset(name, labels)[1])

    gauge = counter

    def histogram(self, name: str, **labels) -> _Histogram:
        spec, i = self._offset(name, labels)
        return _Histogram(self.values, i, spec.buckets)

    def release(self) -> None:
        del self.values
        if self.shm is not None:
            close_shared_memory(self.shm, self.owner)


class LoopMetrics:
    """What the loop updates: histograms and tick counters every tick, gauges every 25 ticks. The command
    and safety counters are not here: the tick engine counts them in this block itself
    (:class:`hil.telemetry.counters.RunCounters`); only the plant's clipped-excitation count, kept by ``sim``,
    is mirrored."""

    def __init__(self, block: MetricsBlock, driver_names: list[str], period_s: float, drivers=(),
                 fatigue_channels=()) -> None:
        """``drivers``: the loop's drivers, whose ``connected()`` feeds ``hil_controller_connected``;
        ``fatigue_channels``: the channel names of ``hil_fatigue_fitness`` (in channel order)."""
        self.block = block
        self.lateness = block.histogram("hil_tick_lateness_seconds")
        self.step = block.histogram("hil_plant_step_seconds")
        self.period = block.histogram("hil_tick_period_seconds")
        self.latency = block.histogram("hil_command_latency_seconds")
        self.ticks = block.counter("hil_ticks_total")
        self.misses = block.counter("hil_deadline_misses_total")
        self.clipped = block.counter("hil_excitation_clipped_total")
        self.safety_stops = block.counter("hil_safety_stops_total")
        self.unrecorded = block.counter("hil_commands_unrecorded_total")
        self.unwritten = {s: block.counter("hil_records_unwritten_total", stream=s)
                          for s in ("ticks", "commands", "drivers")}
        self.gh = block.gauge("hil_gh_stability")
        self.rtf = block.gauge("hil_realtime_factor")
        self.running = block.gauge("hil_running")
        self.privileged = block.gauge("hil_realtime_privileges")
        self.connected = {i: block.gauge("hil_controller_connected", driver=n) for i, n in enumerate(driver_names)}
        self.fitness = [block.gauge("hil_fatigue_fitness", channel=n) for n in fatigue_channels]
        self.period_s = period_s
        self.drivers = tuple(drivers)
        self.last_start = 0
        self.first_start = 0
        self.n = 0

    def on_tick(self, record: np.ndarray, engine, actuation_ns: int) -> None:
        """A tick listener (:class:`hil.rt.tick.TickListener`): histograms and counters every tick, gauges
        every 25."""
        rec = record[0]
        start_ns = int(rec["start_ns"])
        self.lateness.observe(rec["lateness_ns"] * 1e-9)
        self.step.observe(rec["compute_ns"] * 1e-9)
        if self.last_start:
            self.period.observe((start_ns - self.last_start) * 1e-9)
        else:
            self.first_start = start_ns
        self.last_start = start_ns
        if engine.n_log:
            self.latency.observe((actuation_ns - int(engine.log["receive_ns"][: engine.n_log].min())) * 1e-9)
        self.ticks.inc()
        if rec["skipped_deadlines"]:
            self.misses.inc()
        if rec["commands_unrecorded"]:
            self.unrecorded.inc(float(rec["commands_unrecorded"]))
        self.n += 1
        if self.n % 25 == 0:
            self.sync(engine, start_ns)

    def sync(self, engine, now_ns: int) -> None:
        self.gh.set(engine.plant.outputs.gh_stability)
        self.clipped.set(engine.plant.clipped_total)
        self.safety_stops.set(1.0 if engine.stop_detail else 0.0)   # the loop's last sync follows the stop tick
        for c, gauge in enumerate(self.fitness):
            gauge.set(engine.fitness[c])
        alive = not engine.watchdog.tripped
        for i, g in self.connected.items():
            link_up = self.drivers[i].connected() if i < len(self.drivers) else True
            g.set(1.0 if alive and link_up else 0.0)
        if now_ns > self.first_start:
            self.rtf.set(self.n * self.period_s / ((now_ns - self.first_start) * 1e-9 + self.period_s))
