"""Serial transport: a RehaStim2 (ScienceMode2) stimulator emulator and a sensor-feedback stream.

Config: one ``[[driver]]`` table; its keys, defaults and ranges are declared once in
:data:`CONFIG_SCHEMA` (the config reference's ``driver (sciencemode2)``).

The protocol runs in the link process (:mod:`drivers.ipc.link_process`) in :class:`drivers.stimulators.rehastim2.device.Rehastim2Emulator`:
Init is resent until InitAck, every command gets exactly one reply, protocol errors get the protocol's
negative replies and are counted by reason. Each accepted StartChannelListMode becomes one channel
command per mapped channel (frequency = 1000 / main interval; channels in the low-frequency mask run at
that frequency / (low-frequency factor + 1)); Stop/Init and a vanished client set every mapped channel to
zero. Watchdog frames feed the loop's controller watchdog. Values within the RehaStim2's ranges but
outside the configured channel limits are acknowledged, as the device would, and then rejected or clamped
by the loop's limits like commands from any transport (counted and recorded).
"""
from __future__ import annotations

import time

from drivers.core.interface import DriverContext
from drivers.ipc.link import PRIORITY_KEY, Inbound, LinkDriver, LinkSpec, link_scheduling_keys
from drivers.stimulators.link import (
    CHANNEL_MAP_KEY,
    PORT_KEY,
    SENSOR_EVERY_KEY,
    SENSOR_PORT_KEY,
    StimulatorEndpoint,
    parse_channel_map,
    stimulator_table,
)
from drivers.stimulators.rehastim2.codec import BAUD_RATE
from drivers.stimulators.rehastim2.device import Activity, Connected, Rehastim2Emulator, Rejected, StimulationChanged
from sim.config_schema import REQUIRED, Key, Section, from_ms


class ScienceModeEndpoint(StimulatorEndpoint):
    """Link-process side: the emulator on the stimulator port, the packet writer on the sensor port."""

    def __init__(self, port: str, sensor_port: str | None, channel_map: list[int], client_timeout_s: float,
                 baudrate: int = BAUD_RATE, sensor_every: int = 1) -> None:
        super().__init__(port, sensor_port, channel_map, client_timeout_s, baudrate, sensor_every)
        self._last_seq = -1
        self._listed: tuple[int, ...] | None = None   # stimulator channels (1-8) of the last update

    def open(self) -> dict[str, str]:
        self.emulator = Rehastim2Emulator()
        return self.open_ports()

    def _zero(self, inbound: Inbound, now: int, seq: int) -> None:
        for idx in self.channel_map:
            if idx >= 0:
                inbound.channel(now, seq, idx, 0.0, 0.0, 0.0, 0)
        self._listed = None

    def _apply(self, stim, inbound: Inbound, now: int) -> None:
        """One channel command per channel of the update (the channel list). The mapped channels outside
        the list are set to zero by the first update of a new list only, not by every update: at 1 kHz
        each command costs the loop time."""
        settings = {c.channel: c for c in stim.channels}
        listed = tuple(sorted(settings))
        new_list, self._listed = listed != self._listed, listed
        base = stim.frequency_hz
        for n, idx in enumerate(self.channel_map, start=1):
            c = settings.get(n)
            if idx < 0:
                if c is not None and c.amplitude_ma > 0:
                    inbound.reject(now, "unknown_channel", stim.counter)
                continue
            if c is None:
                if new_list:
                    inbound.channel(now, stim.counter, idx, 0.0, 0.0, 0.0, 0)
                continue
            slow = (stim.low_frequency_mask >> (n - 1)) & 1
            freq = base / (stim.low_frequency_factor + 1) if slow else base
            inbound.channel(now, stim.counter, idx, float(c.pulse_width_us), float(c.amplitude_ma), freq, int(c.mode))

    def receive(self, inbound: Inbound, timeout_s: float) -> None:
        fed = self._feed_emulator(inbound, timeout_s)
        if fed is None:
            return
        now_s, _, replies, events = fed
        now = int(now_s * 1e9)
        for ev in events:
            if isinstance(ev, StimulationChanged):
                if ev.stimulation is None:
                    self._zero(inbound, now, self._last_seq)
                else:
                    self._last_seq = ev.stimulation.counter
                    self._apply(ev.stimulation, inbound, now)
            elif isinstance(ev, Rejected):
                inbound.reject(now, ev.reason)
            elif isinstance(ev, Connected):
                inbound.set_connected(True)
                inbound.heartbeat(now)
            elif isinstance(ev, Activity):
                inbound.heartbeat(now)
        # the commands go to the loop before the replies go out: a pty write can block for a while (the
        # tty layer hands the bytes over in a kernel worker), and the command must make the next tick
        self._write_all(replies, inbound.ring.aux)

    def periodic(self, inbound: Inbound) -> None:
        em = self.emulator
        now_s = time.monotonic()
        if em.connected and em.last_activity_s is not None and now_s - em.last_activity_s > self.client_timeout_s:
            em.reset()                               # the client is gone: zero, and offer Init again
            self._zero(inbound, int(now_s * 1e9), self._last_seq)
            inbound.set_connected(False)
        self._write_all(em.poll(now_s), inbound.ring.aux)


#: ``[[driver]] type = "sciencemode2"``, in the order the keys are read (the first bad one is reported).
CONFIG_SCHEMA = Section("driver (sciencemode2)", "A RehaStim2 (ScienceMode2) stimulator emulator on a serial port, "
                        "with a sensor-feedback stream (configs/serial.toml).", (
    Key("type", "value", REQUIRED, "the driver: `sciencemode2`"),
    PORT_KEY,
    SENSOR_PORT_KEY,
    CHANNEL_MAP_KEY,
    Key("client_timeout_ms", "number", 2500.0, "no frame from the client for this long: it is gone",
        lo=2000.0, hi=60000.0, why="pysciencemode sends its watchdog commands up to 1.6 s apart; a client "
                                   "silent for a minute is gone", field="client_timeout_s", to_si=from_ms),
    SENSOR_EVERY_KEY,
    Key("baudrate", "integer", BAUD_RATE, "serial line rate of a real tty (8E1), baud; a pty ignores it",
        lo=1, hi=100_000_000),
    PRIORITY_KEY,
), array=True)
KEYS = CONFIG_SCHEMA.by_name


class ScienceModeDriver(LinkDriver):
    """Loop side of the ScienceMode2 emulator (config keys: :data:`CONFIG_SCHEMA`)."""

    name = "sciencemode2"
    config_schema = CONFIG_SCHEMA

    @classmethod
    def parse_config(cls, table: dict, ctx: DriverContext) -> LinkSpec:
        t = stimulator_table(table, ctx)
        port, sensor = t.key(KEYS["port"]), t.key(KEYS["sensor_port"])
        channel_map = parse_channel_map(t, list(ctx.channel_names))
        timeout_s = KEYS["client_timeout_ms"].si(t.key(KEYS["client_timeout_ms"]))
        every, baud = t.key(KEYS["sensor_every"]), t.key(KEYS["baudrate"])
        priority, loop_cpu = link_scheduling_keys(t, ctx)
        t.done()
        args = dict(port=port, sensor_port=None if sensor == "none" else sensor, channel_map=channel_map,
                    client_timeout_s=timeout_s, baudrate=baud, sensor_every=every)
        return LinkSpec(args, priority, loop_cpu)

    @classmethod
    def open(cls, spec: LinkSpec, ctx: DriverContext) -> "ScienceModeDriver":
        return cls(ScienceModeEndpoint, spec.endpoint_args, ctx.frame_dtype, index=ctx.index,
                   priority=spec.priority, loop_cpu=spec.loop_cpu)
