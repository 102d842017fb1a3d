"""CAN transport: any python-can interface, the message set of ``configs/fes-hil.dbc`` (cantools).

Config: one ``[[driver]]`` table; its keys, defaults and ranges are declared once in
:data:`CONFIG_SCHEMA` (the config reference's ``driver (can)``).

A ``udp_multicast`` group must be interface-local (:mod:`drivers.can.local_bus`: nothing leaves the host, nothing
from another host is accepted) unless ``allow_lan = true``.

Bus I/O, decoding and validation run in the link process (:mod:`drivers.ipc.link_process`). A received frame is
rejected, counted by reason and never reaches the stimulation when it is an error or remote frame
(``bad_frame``), has an unknown id in the controller range 0x200-0x2FF (``unknown_id``; other ids are
other nodes' traffic and are filtered out), a DLC other than the DBC length (``bad_length``), a signal
outside its DBC range (``out_of_range``), or a rolling counter equal to the last one of the same message
and channel/block (``duplicate_counter``) or 1..127 behind it (``stale_counter``).
"""
from __future__ import annotations

import os
import select
import time

import numpy as np

from drivers.can.dbc import (
    FRAME_ID_EXCITATION,
    FRAME_ID_GROUP,
    FRAME_ID_HEARTBEAT,
    FRAME_ID_STATUS,
    FRAME_ID_STIM,
    DbcFileError,
    read_dbc,
)
from drivers.can.feedback import LAB_MESSAGES, FeedbackSet, lab_sensor_lacking
from drivers.can.local_bus import HOST_LOCAL_GROUP, HostLocalUdpMulticastBus, is_host_local_group
from drivers.core.config_table import ConfigTable
from drivers.core.contract import frame_dtype, lab_fields
from drivers.core.interface import DriverContext
from drivers.ipc.link import (
    AUX_FRAMES_OUT,
    AUX_SEND_ERRORS,
    PRIORITY_KEY,
    Inbound,
    LinkDriver,
    LinkEndpoint,
    LinkSpec,
    link_scheduling_keys,
)
from sim.config_schema import REQUIRED, Key, Section
from sim.das3.config import unknown_name

CONTROLLER_ID_BASE, CONTROLLER_ID_MASK = 0x200, 0x700
FEEDBACK_MESSAGES = ("HIL_Status", "HIL_JointAngle", "HIL_JointVelocity", "HIL_Arm", "HIL_Force")
FD_MESSAGES = ("HIL_SensorFD",)

DEFAULT_DBC = "fes-hil.dbc"
_RANGE_TOL = 1e-9


#: ``[[driver]] type = "can"``, in the order the keys are read (the first bad one is reported).
CONFIG_SCHEMA = Section("driver (can)", "A CAN controller over python-can, frames from the DBC (configs/can.toml).", (
    Key("type", "value", REQUIRED, "the driver: `can`"),
    Key("interface", "string", "udp_multicast", "python-can interface (built-in or plug-in)"),
    Key("dbc", "string", DEFAULT_DBC, "DBC file, relative to the config file"),
    Key("allow_lan", "boolean", False, "allow a udp_multicast group that reaches the network (other hosts could "
        "command the arm)"),
    Key("channel", "string", HOST_LOCAL_GROUP, "python-can channel; for udp_multicast an interface-local group "
        "unless allow_lan (other interfaces: no default)"),
    Key("bus", "table", None, "`[driver.bus]`: python-can Bus keyword arguments", why="python-can Bus arguments"),
    Key("feedback", "strings", FEEDBACK_MESSAGES, "feedback messages sent every tick, each once",
        choices=FEEDBACK_MESSAGES + FD_MESSAGES + LAB_MESSAGES),
    Key("feedback_every", "integer", 1, "send the feedback set every Nth tick", lo=1, hi=1_000_000),
    Key("counter_reset_s", "number", 0.5, "a message silent this long accepts any rolling counter (a restarted "
        "controller)", lo=0.0, hi=60.0, lo_exclusive=True,
        why="a restarted controller's frames may be refused as stale this long"),
    PRIORITY_KEY,
), array=True)
KEYS = CONFIG_SCHEMA.by_name
#: ``[driver.bus]`` of a CAN driver: passed to ``can.Bus`` as given (any python-can argument), ``protocol`` by name.
BUS_SCHEMA = Section("driver.bus (can)", "python-can `Bus` keyword arguments, passed on as given (e.g. `bitrate`, "
                     "`fd`); the keys below are the ones the driver reads itself.", (
    Key("protocol", "string", None, "a python-can `CanProtocol` by name, e.g. `CAN_FD`"),
))


class CanEndpoint(LinkEndpoint):
    """Link-process side of the CAN transport."""

    def __init__(self, interface: str, channel, dbc_path: str, muscle_names: list[str],
                 bus_kwargs: dict | None = None,
                 feedback: tuple[str, ...] = FEEDBACK_MESSAGES, feedback_every: int = 1,
                 counter_reset_s: float = 0.5, connected_timeout_s: float = 1.0, frame: np.dtype | None = None) -> None:
        self.interface, self.channel, self.dbc_path = interface, channel, dbc_path
        self.frame = frame_dtype() if frame is None else frame     # the run's sensor frame (with lab sensors)
        self.muscle_index = {f"u_{m}": i for i, m in enumerate(muscle_names)}
        self.bus_kwargs = dict(bus_kwargs or {})
        self.feedback = tuple(feedback)
        self.feedback_every = feedback_every
        self.counter_reset_ns = int(counter_reset_s * 1e9)
        self.connected_timeout_ns = int(connected_timeout_s * 1e9)
        self.bus = None
        self._fd = None
        self.counters: dict[tuple[int, int], tuple[int, int]] = {}
        self._last_valid = 0

    def open(self) -> dict[str, str]:
        import can
        import cantools
        self.db = read_dbc(self.dbc_path)
        self._can_message = can.Message
        self._can_error = can.CanError
        self._decode_error = cantools.database.DecodeError
        filters = [{"can_id": CONTROLLER_ID_BASE, "can_mask": CONTROLLER_ID_MASK, "extended": False}]
        if self.interface == "udp_multicast" and is_host_local_group(self.channel):
            self.bus = HostLocalUdpMulticastBus(channel=self.channel, can_filters=filters, **self.bus_kwargs)
        else:
            self.bus = can.Bus(interface=self.interface, channel=self.channel, can_filters=filters, **self.bus_kwargs)
        try:
            self.feedback_set = FeedbackSet([self._feedback_message(can, name) for name in self.feedback],
                                            self.frame, self.dbc_path)
        except (ValueError, TypeError):
            self.bus.shutdown()
            raise
        self._frame_ids = [(msg.frame_id, msg.is_fd) for msg, _, _ in self.feedback_set.frames]
        # accepted range of every signal of the controller's messages, by frame id
        self._rx_ranges = {m.frame_id: {s.name: (-np.inf if s.minimum is None else s.minimum - _RANGE_TOL,
                                                 np.inf if s.maximum is None else s.maximum + _RANGE_TOL)
                                        for s in m.signals}
                           for m in self.db.messages if m.frame_id < FRAME_ID_STATUS}
        try:
            fd = self.bus.fileno()
        except (NotImplementedError, AttributeError, OSError):
            fd = None
        self._fd = fd if isinstance(fd, int) and fd >= 0 else None
        return {"can": f"{self.interface}:{self.channel}"}

    def _feedback_message(self, can, name: str):
        """The cantools message of one feedback message; ValueError if missing or not sendable on the bus."""
        try:
            msg = self.db.get_message_by_name(name)
        except KeyError:
            raise ValueError(f"feedback {name} is not in {self.dbc_path}: regenerate it with `hil can dbc`") from None
        if msg.is_fd and getattr(self.bus, "protocol", None) == can.CanProtocol.CAN_20:
            raise ValueError(f"feedback {name} is a CAN FD frame but the {self.interface} bus is classic CAN: in "
                             "[driver.bus] set fd = true (socketcan, pcan, kvaser, ...; udp_multicast is FD by "
                             'default) or protocol = "CAN_FD" (virtual)')
        return msg

    # -- receive ------------------------------------------------------------------------------
    def fileno(self) -> int | None:
        return self._fd

    def receive(self, inbound: Inbound, timeout_s: float) -> None:
        msg = self.bus.recv(timeout_s)
        while msg is not None:
            now = time.monotonic_ns()
            inbound.count_in()
            if self.handle(msg, now, inbound):
                self._last_valid = now
                inbound.set_connected(True)
            msg = self.bus.recv(0.0)

    def periodic(self, inbound: Inbound) -> None:
        if self._last_valid and time.monotonic_ns() - self._last_valid > self.connected_timeout_ns:
            inbound.set_connected(False)
            self._last_valid = 0

    def handle(self, msg, now: int, inbound: Inbound) -> bool:
        """Validate and decode one received frame into records; False if it was rejected."""
        if msg.is_error_frame or msg.is_remote_frame:
            inbound.reject(now, "bad_frame")
            return False
        if msg.is_extended_id:
            inbound.reject(now, "unknown_id")
            return False
        fid = msg.arbitration_id
        try:
            spec = self.db.get_message_by_frame_id(fid)
        except KeyError:
            inbound.reject(now, "unknown_id")
            return False
        if fid >= FRAME_ID_STATUS:           # a plant message in the controller range: not for us
            inbound.reject(now, "unknown_id")
            return False
        data = bytes(msg.data)
        if len(data) != spec.length or msg.dlc != spec.length:
            inbound.reject(now, "bad_length")
            return False
        try:
            values = spec.decode(data, decode_choices=False)
        except (self._decode_error, ValueError, KeyError):
            inbound.reject(now, "out_of_range" if spec.is_multiplexed() else "bad_frame")
            return False
        ranges = self._rx_ranges[fid]
        for name, v in values.items():
            lo, hi = ranges[name]
            if not lo <= v <= hi:
                inbound.reject(now, "out_of_range")
                return False
        counter = int(values["counter"])
        key = (fid, int(values.get("channel", values.get("block", values.get("group", 0)))))
        previous = self.counters.get(key)
        if previous is not None and now - previous[1] < self.counter_reset_ns:
            step = (counter - previous[0]) % 256
            if step == 0:
                inbound.reject(now, "duplicate_counter", counter)
                return False
            if step >= 128:
                inbound.reject(now, "stale_counter", counter)
                return False
        self.counters[key] = (counter, now)
        if fid == FRAME_ID_STIM:
            on = bool(values["enable"])
            inbound.channel(now, counter, int(values["channel"]) - 1, float(values["pulse_width"]),
                            float(values["amplitude"]) if on else 0.0, float(values["frequency"]),
                            int(values["mode"]))
        elif fid == FRAME_ID_EXCITATION:
            for name, v in values.items():
                m = self.muscle_index.get(name)
                if m is not None:
                    inbound.excitation(now, counter, m, float(v))
        elif fid == FRAME_ID_GROUP:
            inbound.group_excitation(now, counter, int(values["group"]), float(values["value"]))
        elif fid == FRAME_ID_HEARTBEAT:
            inbound.heartbeat(now, counter)
        return True

    # -- send ----------------------------------------------------------------------------------
    def send_feedback(self, records: np.ndarray, stats: np.ndarray) -> None:
        """Each record's feedback set (:class:`drivers.can.feedback.FeedbackSet`), ``HIL_Status`` first
        when configured so, values saturated to the DBC range."""
        fd = self._fd if self.inbound is not None else None
        for rec in records:
            frame = rec["frame"]
            if int(frame["tick"]) % self.feedback_every:
                continue
            payloads = self.feedback_set.pack(frame, int(rec["echo_seq"]))
            for (fid, fd_frame), data in zip(self._frame_ids, payloads, strict=True):
                try:
                    self.bus.send(self._can_message(arbitration_id=fid, data=data, is_extended_id=False,
                                                    is_fd=fd_frame, bitrate_switch=fd_frame))
                    stats[AUX_FRAMES_OUT] += 1
                except self._can_error:
                    stats[AUX_SEND_ERRORS] += 1
                # a controller answers the status frame at once: take its command between our frames
                if fd is not None and select.select([fd], [], [], 0)[0]:
                    self.receive(self.inbound, 0.0)

    def close(self) -> None:
        if self.bus is not None:
            self.bus.shutdown()
            self.bus = None


class CanDriver(LinkDriver):
    """The loop side of the CAN transport (config keys: :data:`CONFIG_SCHEMA`)."""

    name = "can"
    config_schema = (CONFIG_SCHEMA, BUS_SCHEMA)

    @classmethod
    def parse_config(cls, table: dict, ctx: DriverContext) -> LinkSpec:
        t = ConfigTable(table, ctx.key, ctx.file)
        t.get("type")
        interface = t.key(KEYS["interface"])
        from can.interfaces import VALID_INTERFACES  # python-can's built-in and plug-in interfaces
        if interface not in VALID_INTERFACES:
            raise t.error("interface", unknown_name("python-can interface", interface, VALID_INTERFACES))
        dbc = t.key(KEYS["dbc"])
        dbc_path = dbc if os.path.isabs(dbc) else os.path.join(ctx.base_dir, dbc)
        if not os.path.isfile(dbc_path):
            raise t.error("dbc", f"DBC file {dbc_path} not found")
        try:
            names = {m.name for m in read_dbc(dbc_path).messages}
        except DbcFileError as exc:
            raise t.error("dbc", str(exc)) from None
        args = dict(interface=interface, channel=_channel(t, interface), dbc_path=dbc_path,
                    muscle_names=list(ctx.muscle_names), bus_kwargs=_bus_arguments(t), feedback=_feedback_set(t),
                    feedback_every=t.key(KEYS["feedback_every"]), counter_reset_s=t.key(KEYS["counter_reset_s"]))
        if lab_fields(ctx.frame_dtype):
            args["frame"] = ctx.frame_dtype
        for name in args["feedback"]:
            if name not in names:
                raise t.error("feedback", f"{name} is not in {dbc_path}: regenerate it with `hil can dbc`")
        for name in args["feedback"]:
            lacking = lab_sensor_lacking(name, ctx.frame_dtype)
            if lacking:
                raise t.error("feedback", f"{name} needs {lacking} in the config")
        priority, loop_cpu = link_scheduling_keys(t, ctx)
        t.done()
        return LinkSpec(args, priority, loop_cpu)

    @classmethod
    def open(cls, spec: LinkSpec, ctx: DriverContext) -> "CanDriver":
        return cls(CanEndpoint, spec.endpoint_args, ctx.frame_dtype, index=ctx.index, priority=spec.priority,
                   loop_cpu=spec.loop_cpu, group_names=ctx.group_names)


def _channel(t: ConfigTable, interface: str):
    """``channel``; a udp_multicast group that reaches the network needs ``allow_lan = true``.

    Any host on the lab network could otherwise command the arm, so the opt-in is explicit.
    """
    allow_lan = t.key(KEYS["allow_lan"])
    if interface != "udp_multicast":
        return t.get("channel")
    channel = t.key(KEYS["channel"])
    if not is_host_local_group(channel) and not allow_lan:
        raise t.error("channel", f"udp_multicast group {channel} reaches the network: other hosts could command "
                                 f'the arm. Use an interface-local group such as "{HOST_LOCAL_GROUP}" to stay on '
                                 "this host, or set allow_lan = true for controllers on other machines "
                                 "(configs/can-lan.toml)")
    return channel


def _bus_arguments(t: ConfigTable) -> dict:
    """``[driver.bus]``: python-can Bus keyword arguments; ``protocol`` by name (e.g. "CAN_FD")."""
    bus_kwargs = t.key(KEYS["bus"])
    if isinstance(bus_kwargs.get("protocol"), str):      # e.g. the virtual bus: protocol = "CAN_FD"
        import can
        names = [p.name for p in can.CanProtocol]
        if bus_kwargs["protocol"] not in names:
            raise t.error("bus", f"protocol must be one of {', '.join(names)}, not {bus_kwargs['protocol']!r}")
        bus_kwargs = {**bus_kwargs, "protocol": can.CanProtocol[bus_kwargs["protocol"]]}
    return bus_kwargs


def _feedback_set(t: ConfigTable) -> tuple[str, ...]:
    """``feedback``: the feedback messages sent every tick, each once."""
    feedback = t.key(KEYS["feedback"])
    if not feedback:
        raise t.error("feedback", "needs at least one message (the controller's tick and echo counter)")
    twice = sorted({m for m in feedback if feedback.count(m) > 1})
    if twice:
        raise t.error("feedback", f"lists {', '.join(twice)} more than once (each would be sent twice a tick)")
    return feedback
