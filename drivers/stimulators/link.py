"""What the emulated stimulators (RehaStim2 :mod:`drivers.stimulators.rehastim2.driver`, P24 :mod:`drivers.stimulators.p24.driver`) share in
their link process: the stimulator port and the optional sensor-stream port, the reply writer, the sensor
frames, and the ``channel_map`` key that wires stimulator channels to the run's stimulation channels."""
from __future__ import annotations

import select
import time

import numpy as np

from drivers.core.config_table import ConfigTable
from drivers.ipc.link import AUX_FRAMES_OUT, AUX_SEND_ERRORS, LinkEndpoint
from drivers.stimulators.sensor_stream import encode_packet
from drivers.stimulators.serial_port import SerialPort
from sim.config_schema import Key

N_STIMULATOR_CHANNELS = 8


class StimulatorEndpoint(LinkEndpoint):
    """Link-process side of an emulated stimulator: subclasses build their emulator in :meth:`open` after
    :meth:`open_ports` and speak its protocol in ``receive`` and ``periodic``."""

    parity = "E"

    def __init__(self, port: str, sensor_port: str | None, channel_map: list[int], client_timeout_s: float,
                 baudrate: int, sensor_every: int = 1) -> None:
        self.port_spec, self.sensor_spec = port, sensor_port
        self.channel_map = list(channel_map)      # stimulator channel n (1-based) -> loop channel index or -1
        self.client_timeout_s = client_timeout_s
        self.baudrate, self.sensor_every = baudrate, sensor_every
        self.port = self.sensor = None

    def open_ports(self) -> dict[str, str]:
        """Open (or create, for "pty") the stimulator port and the sensor port; the ports to announce."""
        self.port = SerialPort(self.port_spec, self.baudrate, parity=self.parity)
        ports = {"stimulator": self.port.path}
        if self.sensor_spec:
            self.sensor = SerialPort(self.sensor_spec, self.baudrate, parity=self.parity)
            ports["sensors"] = self.sensor.path
        return ports

    def fileno(self) -> int:
        return self.port.fd

    def _feed_emulator(self, inbound, timeout_s: float):
        """Wait up to ``timeout_s`` for bytes from the controller and hand them to ``self.emulator``, counting
        its whole frames in; (time, frames, replies, events), or None when nothing arrived."""
        if timeout_s > 0:
            select.select([self.port.fd], [], [], timeout_s)
        chunk = self.port.read()
        if not chunk:
            return None
        now_s = time.monotonic()
        before = self.emulator.counters["frames_in"]
        replies, events = self.emulator.receive(chunk, now_s)
        frames = self.emulator.counters["frames_in"] - before
        inbound.count_in(frames)
        return now_s, frames, replies, events

    def _write_all(self, frames, stats) -> None:
        for f in frames:
            if self.port.write(f):
                stats[AUX_FRAMES_OUT] += 1
            else:
                stats[AUX_SEND_ERRORS] += 1

    def send_feedback(self, records: np.ndarray, stats: np.ndarray) -> None:
        if self.sensor is None:
            return
        for rec in records:
            frame = rec["frame"]
            if int(frame["tick"]) % self.sensor_every:
                continue
            if self.sensor.write(encode_packet(frame.tobytes(), int(rec["echo_seq"]))):
                stats[AUX_FRAMES_OUT] += 1
            else:
                stats[AUX_SEND_ERRORS] += 1

    def close(self) -> None:
        for p in (self.port, self.sensor):
            if p is not None:
                p.close()


#: ``channel_map`` of a stimulator's table (checked by :func:`parse_channel_map`).
PORT_KEY = Key("port", "string", "pty", 'stimulator port: "pty" (a pseudo-terminal, announced) or a tty')
SENSOR_PORT_KEY = Key("sensor_port", "string", "pty", 'sensor stream: "pty", a tty, or "none"')
SENSOR_EVERY_KEY = Key("sensor_every", "integer", 1, "stream every Nth frame", lo=1, hi=1_000_000)
CHANNEL_MAP_KEY = Key("channel_map", "value", list(range(1, N_STIMULATOR_CHANNELS + 1)),
                      "stimulator channel n -> a `[[stimulation.channel]]` by number (1..) or name; 0: not connected")


def parse_channel_map(t: ConfigTable, names: list[str]) -> list[int]:
    """``channel_map``: stimulator channel n -> index of a [[stimulation.channel]] (by number or name), -1
    for not connected."""
    raw_map = t.key(CHANNEL_MAP_KEY)
    if not isinstance(raw_map, list) or len(raw_map) != N_STIMULATOR_CHANNELS:
        raise t.error("channel_map", f"must list {N_STIMULATOR_CHANNELS} entries (stimulator channels 1..8)")
    channel_map = []
    for n, entry in enumerate(raw_map, start=1):
        if isinstance(entry, str) and entry in names:
            channel_map.append(names.index(entry))
        elif isinstance(entry, int) and not isinstance(entry, bool) and 0 <= entry <= len(names):
            channel_map.append(entry - 1)      # 0 -> -1: not connected
        else:
            raise t.error("channel_map", f"entry {n} ({entry!r}) must be 0, a channel number 1..{len(names)} "
                                         f"or one of {names}")
    return channel_map


def stimulator_table(table: dict, ctx) -> ConfigTable:
    """The ``[[driver]]`` table of an emulated stimulator, checked to have stimulation channels to drive."""
    t = ConfigTable(table, ctx.key, ctx.file)
    t.get("type")
    if not ctx.channel_names:
        raise t.error("type", "a stimulator drives stimulation channels: set [stimulation] mode = \"channels\"")
    return t
