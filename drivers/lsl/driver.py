"""Lab Streaming Layer transport: a BCI decoder (or any LSL program) drives the stimulation, and the arm's
kinematics, the applied stimulation and the safety events go out as LSL streams (Lab Recorder, XDF).

Config: one ``[[driver]]`` table (needs ``[stimulation] mode = "channels"`` and the ``pylsl`` package); its keys,
defaults and ranges are declared once in :data:`CONFIG_SCHEMA` (the config reference's ``driver (lsl)``).

Streams and their layouts: :mod:`drivers.lsl.streams`; the inlet's rules (resolution, refusal of a wrong
layout, sample validation, a lost stream): :mod:`drivers.lsl.inlet`. All LSL I/O runs in the link process
(:mod:`drivers.ipc.link_process`): a receiver thread pulls the controller's samples, the main thread pushes
one outlet sample per tick. The loop's side costs O(1) per tick: ``fetch`` hands over only the newest
sample that arrived before the tick's start (older ones are superseded, counted), and the finished tick
record (:meth:`LslDriver.on_tick`, a :class:`hil.rt.tick.TickListener`) is one copy into the outbound ring.
Sample timestamps are LSL's clock at the tick's start, so an XDF file aligns the arm with EEG and EMG.

With ``role = "voluntary"`` (hil.rt.voluntary) the stream is the patient's own movement instead: one float32
excitation (0..1) per muscle group of ``groups`` (:class:`drivers.lsl.inlet.ExcitationInlet`), and the driver opens
no outlets (a run's controller, LSL or not, publishes the arm).
"""
from __future__ import annotations

import collections
import importlib.util
import os
import socket
import time

import numpy as np

from drivers.core.config_table import ConfigTable
from drivers.core.contract import REJECT_REASONS, lab_fields
from drivers.core.interface import CommandSink, DriverContext
from drivers.ipc.link import (
    AUX_FRAMES_OUT,
    AUX_SEND_ERRORS,
    INBOUND_CAPACITY,
    OUTBOUND_CAPACITY,
    PRIORITY_KEY,
    Inbound,
    LinkDriver,
    LinkEndpoint,
    LinkSpec,
    link_scheduling_keys,
)
from drivers.lsl.inlet import AUX_DROPPED, AUX_SUPERSEDED, CommandInlet, ExcitationInlet
from drivers.lsl.streams import (
    ARM_STREAM,
    ARM_TYPE,
    COMMAND_TYPE,
    EVENTS_STREAM,
    EVENTS_TYPE,
    STIM_STREAM,
    STIM_TYPE,
    Channel,
    StatusEvents,
    arm_channels,
    arm_values,
    status_names,
    stim_channels,
    stim_values,
    stream_info,
)
from sim.config_schema import REQUIRED, Key, Section

LINGER_S = 0.2     # at close: time for the last samples to reach connected inlets

#: A liblsl config (``api_config``, or LSLAPICFG for other programs) that keeps LSL on this machine: no
#: multicast or broadcast on the network, streams found by unicast to 127.0.0.1, discovery queries heard on
#: 127.0.0.1 only, quickly (for tests and ``hil bench link``; a lab uses its network's config). liblsl still
#: binds each outlet's data and service ports on every interface (README "Network exposure").
LOCALHOST_API_CONFIG = """[ports]
IPv6 = disable
[multicast]
ResolveScope = machine
ListenAddress = 127.0.0.1
Interfaces = {127.0.0.1}
[lab]
KnownPeers = {127.0.0.1}
[tuning]
MulticastMinRTT = 0.05
UnicastMinRTT = 0.05
[log]
level = -3
"""


def tick_record(frame_dtype: np.dtype, n_channels: int) -> np.dtype:
    """What the loop hands the link per tick: the tick's start (CLOCK_MONOTONIC ns), the applied pulse width
    (us), current (mA) and frequency (Hz) per channel, and the sensor frame. ``failed`` = 1: the run
    ended inside this tick (its engine step raised: a plant error); only ``start_ns`` and the tick are set."""
    return np.dtype([("failed", "u1"), ("start_ns", "<i8"), ("applied", "<f8", (n_channels, 3)),
                     ("frame", frame_dtype)])


def clock_offset(local_clock) -> float:
    """LSL's clock minus CLOCK_MONOTONIC, s, from the tightest of a few paired readings."""
    best = None
    for _ in range(16):
        t0 = time.monotonic_ns()
        lsl = local_clock()
        t1 = time.monotonic_ns()
        if best is None or t1 - t0 < best[0]:
            best = (t1 - t0, lsl - (t0 + t1) / 2e9)
    return best[1]


class LslEndpoint(LinkEndpoint):
    """Link-process side: the three outlets and the controller's inlet."""

    poll_interval_s = 0.02      # a pull waits at most this long: the receiver thread stops within it

    def __init__(self, dof_names: list[str], channel_names: list[str], period_s: float, predicate: str,
                 arm_every: int = 1, api_config: str | None = None, groups: list[str] | None = None,
                 group_index: list[int] | None = None, lab: tuple[str, ...] = ()) -> None:
        self.dof_names, self.channel_names = list(dof_names), list(channel_names)
        self.groups, self.group_index = groups, group_index     # a voluntary source's groups (no outlets)
        self.lab = tuple(lab)         # lab-sensor fields appended to the arm stream (streams.lab_fields)
        self.period_s, self.predicate, self.arm_every = period_s, predicate, arm_every
        self.api_config = api_config
        self.events: collections.deque = collections.deque()      # (LSL time, marker) from the receiver thread
        self.status_events = StatusEvents()
        self.inlet = None
        self.outlets: list = []
        self.last_tick = self.last_ts = None

    def open(self) -> dict[str, str]:
        if self.api_config:
            os.environ["LSLAPICFG"] = self.api_config      # read by liblsl at its first use, in this process
        import pylsl
        if self.groups:
            self.inlet = ExcitationInlet(pylsl, self.predicate, self.groups, self.group_index, self.events)
            return {"inlet": self.predicate}
        self.offset_s = clock_offset(pylsl.local_clock)
        rate, host = 1.0 / self.period_s, socket.gethostname()
        arm, stim = arm_channels(self.dof_names, self.lab, self.channel_names), stim_channels(self.channel_names)
        self.arm = pylsl.StreamOutlet(stream_info(pylsl, ARM_STREAM, ARM_TYPE, arm, rate / self.arm_every, "float32",
                                                  f"{ARM_STREAM}@{host}"))
        self.stim = pylsl.StreamOutlet(stream_info(pylsl, STIM_STREAM, STIM_TYPE, stim, rate, "float32",
                                                   f"{STIM_STREAM}@{host}"))
        self.markers = pylsl.StreamOutlet(stream_info(pylsl, EVENTS_STREAM, EVENTS_TYPE, (Channel("event", "", "Marker"),),
                                                      pylsl.IRREGULAR_RATE, "string", f"{EVENTS_STREAM}@{host}"))
        self.outlets = [self.arm, self.stim, self.markers]
        self._arm_buf = np.zeros((OUTBOUND_CAPACITY, len(arm)), np.float32)
        self._stim_buf = np.zeros((OUTBOUND_CAPACITY, len(stim)), np.float32)
        self.inlet = CommandInlet(pylsl, self.predicate, self.channel_names, self.events)
        return {"inlet": self.predicate, "outlets": f"{ARM_STREAM}, {STIM_STREAM}, {EVENTS_STREAM}"}

    def receive(self, inbound: Inbound, timeout_s: float) -> None:
        self.inlet.poll(inbound, timeout_s)

    def _stamp(self, start_ns) -> np.ndarray:
        """LSL timestamps of CLOCK_MONOTONIC ns."""
        return np.asarray(start_ns, np.float64) * 1e-9 + self.offset_s

    def _marker(self, ts: float, text: str) -> None:
        self.markers.push_sample([text], float(ts))

    def send_feedback(self, records: np.ndarray, stats: np.ndarray) -> None:
        """The ticks' samples and markers; a failed tick's ``plant_error`` marker; the inlet's markers."""
        if not self.outlets:       # a voluntary source: nothing to publish
            self.events.clear()
            return
        while self.events:
            self._marker(*self.events.popleft())
        done = records[records["failed"] == 0]
        if done.shape[0]:
            self._ticks(done, stats)
        for rec in records[records["failed"] != 0]:
            self._marker(self._stamp(rec["start_ns"]), f"plant_error tick={int(rec['frame']['tick'])}")

    def _ticks(self, done: np.ndarray, stats: np.ndarray) -> None:
        frames = done["frame"]
        ticks, ts = frames["tick"], self._stamp(done["start_ns"])
        if self.last_tick is None:
            self._marker(ts[0], f"run_start tick={int(ticks[0])} status={status_names(int(frames['status'][0]))}")
        keep = ticks % self.arm_every == 0
        try:
            if keep.any():
                self.arm.push_chunk(arm_values(frames, self._arm_buf, self.lab)[keep], ts[keep].tolist())
            self.stim.push_chunk(stim_values(done["applied"], self._stim_buf), ts.tolist())
            stats[AUX_FRAMES_OUT] += int(keep.sum()) + done.shape[0]
        except (RuntimeError, ValueError):      # liblsl refused the push: counted, the link goes on
            stats[AUX_SEND_ERRORS] += 1
        for i, text in self.status_events.markers(ticks, frames["status"]):
            self._marker(ts[i], text)
        self.last_tick, self.last_ts = int(ticks[-1]), float(ts[-1])

    def feed_stopped(self) -> None:
        """A zero sample on the stimulation stream and a ``loop_stalled`` marker: the loop stopped ticking."""
        if self.stim is None or self.last_tick is None:
            return
        import pylsl
        now = pylsl.local_clock()
        try:
            self.stim.push_sample([0.0] * self._stim_buf.shape[1], now)
        except (RuntimeError, ValueError):
            return
        self._marker(now, f"loop_stalled after_tick={self.last_tick} stimulation=0")

    def close(self) -> None:
        """``run_stop`` (at the end of the last tick), a moment for the inlets to take it, then release."""
        if self.outlets:
            while self.events:
                self._marker(*self.events.popleft())
            if self.last_tick is not None:
                self._marker(self.last_ts + self.period_s, f"run_stop tick={self.last_tick}")
            if any(o.have_consumers() for o in self.outlets):
                time.sleep(LINGER_S)
        if self.inlet is not None:
            self.inlet.close()
        self.outlets = []
        self.arm = self.stim = self.markers = None


#: ``[[driver]] type = "lsl"``, in the order the keys are read (the first bad one is reported).
CONFIG_SCHEMA = Section("driver (lsl)", "A Lab Streaming Layer controller: commands in, arm and stimulation "
                        "streams out (configs/lsl.toml).", (
    Key("type", "value", REQUIRED, "the driver: `lsl`"),
    Key("arm_every", "integer", 1, "push one arm sample every N ticks", lo=1, hi=1_000_000),
    Key("api_config", "value", None, "a liblsl config file, relative to the config file"),
    Key("inlet", "table", None, "`[driver.inlet]`: the controller's stream", why="the controller's stream (name, type, "
        "source_id)"),
    Key("groups", "strings", [], "`role = \"voluntary\"` only: the muscle groups the patient's stream drives, one "
        "float32 excitation (0..1) each, in this order"),
    PRIORITY_KEY,
), array=True)
KEYS = CONFIG_SCHEMA.by_name
#: ``[driver.inlet]``: the stream the commands come from (printable strings without quotes).
INLET_SCHEMA = Section("driver.inlet (lsl)", f"The controller's command stream, resolved by these properties (type "
                       f"`{COMMAND_TYPE}` unless a name or type is given).", (
    Key("name", "value", None, "the stream's name"),
    Key("type", "value", None, "the stream's type"),
    Key("source_id", "value", None, "the stream's source_id"),
))


class LslDriver(LinkDriver):
    """Loop side of the LSL transport (config keys: :data:`CONFIG_SCHEMA`)."""

    name = "lsl"
    config_schema = (CONFIG_SCHEMA, INLET_SCHEMA)
    fetch_records = INBOUND_CAPACITY      # the whole ring: the newest sample is always the last one taken

    def __init__(self, endpoint_args: dict, frame_dtype: np.dtype, n_channels: int, index: int = 0,
                 priority: int | None = None, loop_cpu: int | None = None, group_names: tuple[str, ...] = ()) -> None:
        self.n_channels = n_channels
        self.per_sample = len(endpoint_args.get("groups") or ()) or n_channels     # link records per sample
        self.superseded = 0                 # samples the loop never applied: a newer one came before the tick
        self._fetched_tick = self._listened_tick = -1
        self._fetched_ns = 0
        super().__init__(LslEndpoint, endpoint_args, frame_dtype, index=index, priority=priority, loop_cpu=loop_cpu,
                         out_dtype=tick_record(frame_dtype, n_channels), group_names=group_names)

    @classmethod
    def parse_config(cls, table: dict, ctx: DriverContext) -> LinkSpec:
        t = ConfigTable(table, ctx.key, ctx.file)
        t.get("type")
        voluntary = ctx.role == "voluntary"
        if not ctx.channel_names and not voluntary:
            raise t.error("type", "an LSL controller commands stimulation channels: set [stimulation] mode = "
                                  "\"channels\"")
        if importlib.util.find_spec("pylsl") is None:
            raise t.error("type", "needs the pylsl package: pip install pylsl (its wheel bundles liblsl)")
        arm_every = t.key(KEYS["arm_every"])
        api_config = _api_config(t, ctx)
        predicate = _inlet_predicate(t, ctx)
        priority, loop_cpu = link_scheduling_keys(t, ctx)
        groups = _voluntary_groups(t, ctx, voluntary)
        t.done()
        args = dict(dof_names=list(ctx.dof_names), channel_names=list(ctx.channel_names), period_s=ctx.period_s,
                    predicate=predicate, arm_every=arm_every, api_config=api_config)
        if groups:
            args.update(groups=groups, group_index=[ctx.group_names.index(g) for g in groups])
        if lab_fields(ctx.frame_dtype):
            args["lab"] = lab_fields(ctx.frame_dtype)
        return LinkSpec(args, priority, loop_cpu)

    @classmethod
    def open(cls, spec: LinkSpec, ctx: DriverContext) -> "LslDriver":
        return cls(spec.endpoint_args, ctx.frame_dtype, len(ctx.channel_names), index=ctx.index,
                   priority=spec.priority, loop_cpu=spec.loop_cpu,
                   group_names=tuple(ctx.group_names) if spec.endpoint_args.get("groups") else ())

    def max_log_entries(self, largest_group: int) -> int:
        """One sample (a command per channel, or per group of a voluntary source, each up to ``largest_group``
        elements), a count per reject reason and a lost link."""
        per_command = max(1, largest_group) if self.group_names else 1
        return self.per_sample * per_command + len(REJECT_REASONS) + 1

    def fetch(self, tick: int, now_ns: int, sink: CommandSink) -> None:
        """The newest sample that arrived before this tick's start (the link pushes whole samples)."""
        self._fetched_tick, self._fetched_ns = tick, now_ns
        self._report_link(now_ns, sink)
        n = self._in.pop_into(self._buf)
        if n:
            lo = max(0, n - self.per_sample)
            self.superseded += lo // self.per_sample
            self._hand_over(lo, n, sink)
            self.frames_received += n - lo

    def publish(self, frame: np.ndarray) -> None:
        """Nothing: the finished tick record goes out in :meth:`on_tick`."""

    def on_tick(self, record: np.ndarray, engine, actuation_ns: int) -> None:
        """The finished tick to the link: its start, the applied stimulation, the frame (``engine``
        unused: rule 6)."""
        r, out = record[0], self._out_rec
        out["start_ns"][0] = r["start_ns"]
        out["applied"][0] = r["applied"][: self.n_channels, :3]
        out["frame"][0] = r["frame"]
        self._listened_tick = self._fetched_tick
        self._send_out()

    @property
    def stats(self) -> dict:
        s = super().stats
        aux = self._in.aux
        s.update(samples_superseded=self.superseded + int(aux[AUX_SUPERSEDED]), samples_dropped=int(aux[AUX_DROPPED]))
        return s

    def _shutdown(self) -> None:
        """A run that ended inside a tick (fetched, never finished: its engine step raised) is reported to
        the link as a failed tick, for the ``plant_error`` marker."""
        if self._fetched_tick > self._listened_tick:
            out = self._out_rec
            out["failed"][0], out["start_ns"][0] = 1, self._fetched_ns
            out["frame"]["tick"][0] = self._fetched_tick
            self._send_out()
        super()._shutdown()


def _voluntary_groups(t: ConfigTable, ctx: DriverContext, voluntary: bool) -> list[str]:
    """``groups``: the muscle groups of a voluntary source's stream (required then, refused otherwise)."""
    groups = t.key(KEYS["groups"])
    if not voluntary:
        if groups:
            raise t.error("groups", "is for a voluntary source only (role = \"voluntary\")")
        return []
    if not groups:
        raise t.error("groups", "a voluntary LSL source needs the muscle groups its stream drives, e.g. "
                                "groups = [\"trapclav\", \"levscap\"]")
    unknown = [g for g in groups if g not in ctx.group_names]
    if unknown or len(set(groups)) != len(groups):
        raise t.error("groups", f"must be distinct muscle groups of the model, not {unknown or groups}")
    return list(groups)


def _api_config(t: ConfigTable, ctx: DriverContext) -> str | None:
    """``api_config``: an existing liblsl config file (relative to the config file), or None."""
    name = t.key(KEYS["api_config"])
    if name is None:
        return None
    if not isinstance(name, str) or not name:
        raise t.error("api_config", f"must be the path of a liblsl config file, not {name!r}")
    path = name if os.path.isabs(name) else os.path.join(ctx.base_dir, name)
    if not os.path.isfile(path):
        raise t.error("api_config", f"liblsl config file {path} not found")
    return path


def _inlet_predicate(t: ConfigTable, ctx: DriverContext) -> str:
    """``[driver.inlet]``: the XPath predicate that resolves the controller's stream by name, type and source_id
    (the type FESCommand unless a name or type is given)."""
    inlet = ConfigTable(t.key(KEYS["inlet"]), f"{ctx.key}.inlet", ctx.file)
    found = {}
    for stream_key in INLET_SCHEMA.keys:
        key, value = stream_key.name, inlet.key(stream_key)
        if value is None:
            continue
        if not isinstance(value, str) or not value or "'" in value or not value.isprintable():
            raise inlet.error(key, f"must be a stream {key} (printable, without quotes), not {value!r}")
        found[key] = value
    inlet.done()
    if "name" not in found and "type" not in found:
        found = {"type": COMMAND_TYPE, **found}
    return " and ".join(f"{k}='{v}'" for k, v in found.items())
