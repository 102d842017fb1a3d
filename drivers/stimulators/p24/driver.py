"""Serial transport: a HasomedScience P24 (ScienceMode4) stimulator emulator and a sensor-feedback stream.

Config: one ``[[driver]]`` table; its keys, defaults and ranges are declared once in
:data:`CONFIG_SCHEMA` (the config reference's ``driver (sciencemode4)``).

The protocol runs in the link process (:mod:`drivers.ipc.link_process`) in
:class:`drivers.stimulators.p24.device.P24Emulator` (``../shared/spec/sciencemode4.md``): every command frame gets one
reply, errors the protocol's results, and each :class:`drivers.stimulators.p24.device.ChannelCommand` becomes one
channel command of the mapped loop channel (pulse mode 0), with the packet number as its sequence number: the
pulse's envelope (:mod:`drivers.stimulators.p24.pulse`), so every point of every pulse meets the loop's limits.
Accepted MlGetCurrentData frames (the keep-alive) feed the loop's watchdog. Values within the P24's ranges
but outside the configured channel limits are acknowledged, as the device would, and then rejected or
clamped by the loop's limits like commands from any transport (counted and recorded).
"""
from __future__ import annotations

import sys
import time

from drivers.core.config_table import ConfigTable
from drivers.core.interface import DriverContext
from drivers.ipc.link import (
    AUX_REJECT_BASE,
    AUX_REJECTS_TOTAL,
    PRIORITY_KEY,
    Inbound,
    LinkDriver,
    LinkSpec,
    link_scheduling_keys,
)
from drivers.stimulators.link import (
    CHANNEL_MAP_KEY,
    PORT_KEY,
    SENSOR_EVERY_KEY,
    SENSOR_PORT_KEY,
    StimulatorEndpoint,
    parse_channel_map,
    stimulator_table,
)
from drivers.stimulators.p24.device import (
    KEEPALIVE_S,
    N_CHANNELS,
    ChannelCommand,
    KeepAlive,
    Notice,
    P24Emulator,
    Rejected,
    Settings,
)
from sim.config_schema import REQUIRED, Key, Section, from_ms

BAUD_RATE = 9600
#: The link's aux words between its totals and its reject counters (free in a link ring) carry the device's
#: own counts, for the driver's statistics.
AUX_STATS = {"charge_unbalanced_pulses": AUX_REJECTS_TOTAL + 1, "electrode_errors": AUX_REJECTS_TOTAL + 2,
             "keepalive_lapses": AUX_REJECTS_TOTAL + 3}
_EMULATOR_COUNTER = {"charge_unbalanced_pulses": "unbalanced_pulses", "electrode_errors": "electrode_errors",
                     "keepalive_lapses": "keepalive_lapses"}
assert max(AUX_STATS.values()) < AUX_REJECT_BASE


class P24Endpoint(StimulatorEndpoint):
    """Link-process side: the emulator on the stimulator port, the packet writer on the sensor port."""

    parity = "N"
    poll_interval_s = 0.01      # the device's own timing (keep-alive, low-level timeouts, ramps) runs in periodic

    def __init__(self, port: str, sensor_port: str | None, channel_map: list[int], client_timeout_s: float,
                 baudrate: int = BAUD_RATE, sensor_every: int = 1, device_id: str = "EMUP24-001",
                 min_frequency_hz: tuple[float, ...] = (10.0,) * N_CHANNELS,
                 electrode_faults: dict[int, float] | None = None, keepalive_s: float = KEEPALIVE_S) -> None:
        super().__init__(port, sensor_port, channel_map, client_timeout_s, baudrate, sensor_every)
        self.settings = Settings(device_id=device_id.encode("ascii"), keepalive_s=keepalive_s,
                                 min_period_s=tuple(1.0 / f for f in min_frequency_hz),
                                 fault_after_s=dict(electrode_faults or {}))
        self._last_frame_s: float | None = None

    def open(self) -> dict[str, str]:
        self.emulator = P24Emulator(self.settings)
        return self.open_ports()

    def receive(self, inbound: Inbound, timeout_s: float) -> None:
        fed = self._feed_emulator(inbound, timeout_s)
        if fed is None:
            return
        now_s, frames, replies, events = fed
        if frames:
            inbound.set_connected(True)
            self._last_frame_s = now_s
        self._hand_over(events, inbound, int(now_s * 1e9))
        # the commands go to the loop before the replies go out (as the RehaStim2 link does)
        self._write_all(replies, inbound.ring.aux)

    def periodic(self, inbound: Inbound) -> None:
        now_s = time.monotonic()
        replies, events = self.emulator.poll(now_s)
        self._hand_over(events, inbound, int(now_s * 1e9))
        self._write_all(replies, inbound.ring.aux)
        if self._last_frame_s is not None and now_s - self._last_frame_s > self.client_timeout_s:
            self._last_frame_s = None
            inbound.set_connected(False)

    def _hand_over(self, events, inbound: Inbound, now: int) -> None:
        """Events to the loop: channel commands of mapped channels, keep-alives as heartbeats, rejects
        counted by reason, notices on stderr; then the device's counts into the aux words."""
        for ev in events:
            if isinstance(ev, ChannelCommand):
                idx = self.channel_map[ev.channel - 1]
                if idx >= 0:
                    inbound.channel(now, ev.number, idx, ev.pulse_width_us, ev.current_ma, ev.frequency_hz, 0)
                elif ev.current_ma > 0:
                    inbound.reject(now, "unknown_channel", ev.number)
            elif isinstance(ev, KeepAlive):      # feeds the watchdog; the echo stays the newest stimulation
                inbound.heartbeat(now)
            elif isinstance(ev, Rejected):
                inbound.reject(now, ev.reason)
            elif isinstance(ev, Notice):
                print(f"hil link: sciencemode4: {ev.text}", file=sys.stderr, flush=True)
        aux, counters = inbound.ring.aux, self.emulator.counters
        for key, word in AUX_STATS.items():
            aux[word] = counters[_EMULATOR_COUNTER[key]]


#: ``[[driver]] type = "sciencemode4"``, in the order the keys are read (the first bad one is reported).
CONFIG_SCHEMA = Section("driver (sciencemode4)", "A P24 (ScienceMode4) stimulator emulator on a serial port, with a "
                        "sensor-feedback stream (configs/p24.toml).", (
    Key("type", "value", REQUIRED, "the driver: `sciencemode4`"),
    PORT_KEY,
    SENSOR_PORT_KEY,
    CHANNEL_MAP_KEY,
    Key("min_frequency_hz", "value", 10.0, "low-level mode: no next pulse within 1/f s sets the channel to zero; "
        "one number in [0.5, 1000] or a list of 8", lo=0.5, hi=1000.0),
    Key("device_id", "string", "EMUP24-001", "GetDeviceId's answer (10 printable ASCII characters)"),
    Key("electrode_fault_channels", "value", [], "stimulator channels (1..8) that get an injected electrode fault"),
    Key("electrode_fault_after_ms", "number", 0.0, "the fault starts this long after the channel's first strong pulse",
        lo=0.0, hi=86_400_000.0, field="electrode_fault_after_s", to_si=from_ms),
    Key("client_timeout_ms", "number", 2500.0, "no frame from the client for this long: shown as disconnected",
        lo=100.0, hi=60000.0, field="client_timeout_s", to_si=from_ms),
    SENSOR_EVERY_KEY,
    Key("baudrate", "integer", BAUD_RATE, "serial line rate of a real tty (8N1), baud; a pty ignores it",
        lo=1, hi=100_000_000),
    PRIORITY_KEY,
), array=True)
KEYS = CONFIG_SCHEMA.by_name


class P24Driver(LinkDriver):
    """Loop side of the P24 emulator (config keys: :data:`CONFIG_SCHEMA`)."""

    name = "sciencemode4"
    config_schema = CONFIG_SCHEMA

    @classmethod
    def parse_config(cls, table: dict, ctx: DriverContext) -> LinkSpec:
        t = stimulator_table(table, ctx)
        args = dict(port=t.key(KEYS["port"]), sensor_port=t.key(KEYS["sensor_port"]),
                    channel_map=parse_channel_map(t, list(ctx.channel_names)),
                    min_frequency_hz=_per_channel(t, KEYS["min_frequency_hz"]),
                    device_id=_device_id(t), electrode_faults=_electrode_faults(t),
                    client_timeout_s=KEYS["client_timeout_ms"].si(t.key(KEYS["client_timeout_ms"])),
                    sensor_every=t.key(KEYS["sensor_every"]), baudrate=t.key(KEYS["baudrate"]))
        if args["sensor_port"] == "none":
            args["sensor_port"] = None
        priority, loop_cpu = link_scheduling_keys(t, ctx)
        t.done()
        return LinkSpec(args, priority, loop_cpu)

    @classmethod
    def open(cls, spec: LinkSpec, ctx: DriverContext) -> "P24Driver":
        return cls(P24Endpoint, spec.endpoint_args, ctx.frame_dtype, index=ctx.index,
                   priority=spec.priority, loop_cpu=spec.loop_cpu)

    @property
    def stats(self) -> dict:
        s = super().stats
        aux = self._in.aux
        s.update({key: int(aux[word]) for key, word in AUX_STATS.items()})
        return s


def _per_channel(t: ConfigTable, key: Key) -> tuple[float, ...]:
    """One number in the key's [lo, hi] for every stimulator channel, or a list of 8."""
    raw, lo, hi = t.key(key), key.lo, key.hi
    values = raw if isinstance(raw, list) else [raw] * N_CHANNELS
    if len(values) != N_CHANNELS or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and lo <= v <= hi for v in values):
        raise t.error(key.name, f"must be a number in [{lo:g}, {hi:g}] or a list of {N_CHANNELS} such numbers")
    return tuple(float(v) for v in values)


def _device_id(t: ConfigTable) -> str:
    value = t.key(KEYS["device_id"])
    if len(value) != 10 or not value.isascii() or not value.isprintable():
        raise t.error("device_id", "must be 10 printable ASCII characters (the P24's serial number)")
    return value


def _electrode_faults(t: ConfigTable) -> dict[int, float]:
    """``electrode_fault_channels`` (stimulator channels 1..8) -> the fault's delay in s."""
    channels = t.key(KEYS["electrode_fault_channels"])
    if not isinstance(channels, list) or not all(
            isinstance(c, int) and not isinstance(c, bool) and 1 <= c <= N_CHANNELS for c in channels):
        raise t.error("electrode_fault_channels", f"must be a list of stimulator channels 1..{N_CHANNELS}")
    after_s = KEYS["electrode_fault_after_ms"].si(t.key(KEYS["electrode_fault_after_ms"]))
    return {c: after_s for c in channels}
