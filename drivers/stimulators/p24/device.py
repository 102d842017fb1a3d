"""ScienceMode4 (HasomedScience P24): the device side of the protocol, as pure Python.

Everything follows ``../shared/spec/sciencemode4.md`` ("the spec"); section names below are its. The frame
codec is :mod:`drivers.stimulators.p24.codec`, pulse shapes :mod:`drivers.stimulators.p24.pulse`, the MlUpdate
payload and measurement samples :mod:`drivers.stimulators.p24.payloads`; this module is the emulated device
(:class:`P24Emulator`) and the events it reports. No I/O, no threads, no clocks: the caller passes the time in
and writes the returned frames, so the same inputs always give the same outputs.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Union

from drivers.stimulators.p24.codec import (
    CMD_GENERAL_ERROR,
    CMD_GET_DEVICE_ID,
    CMD_GET_EXTENDED_VERSION,
    CMD_GET_STIM_STATUS,
    CMD_LL_CHANNEL_CONFIG,
    CMD_LL_INIT,
    CMD_LL_STOP,
    CMD_ML_GET_CURRENT_DATA,
    CMD_ML_INIT,
    CMD_ML_STOP,
    CMD_ML_UPDATE,
    CMD_RESET,
    CMD_UNKNOWN_COMMAND,
    RESULT_ELECTRODE_ERROR,
    RESULT_INVALID_COMMAND,
    RESULT_NOT_INITIALISED,
    RESULT_OK,
    RESULT_PARAMETER_ERROR,
    RESULT_TRANSFER_ERROR,
    STATUS_LOW_LEVEL,
    STATUS_MID_LEVEL,
    STATUS_MID_LEVEL_RUNNING,
    STATUS_NONE,
    Frame,
    FrameError,
    FrameParser,
    encode_frame,
)
from drivers.stimulators.p24.payloads import MAX_CURRENT_MA, N_CHANNELS, measurement_samples, parse_ml_update
from drivers.stimulators.p24.pulse import POINT_SIZE, Pulse, decode_points

KEEPALIVE_S = 2.0                 # spec "Mid level": MlGetCurrentData at least every 2 s
ELECTRODE_DETECT_MA = 15.0        # spec "Results": an electrode error needs >= 15 mA to be detected
HV_LEVEL_ON, HV_LEVEL_OFF = 6, 1  # GetStimStatus high-voltage byte (spec "General layer", inferred)
HIGH_VOLTAGE_V = 150.0            # level 6
ZERO = (0.0, 0.0, 0.0)

COUNTER_KEYS = ("frames_in", "replies_out", "bad_frame", "bad_checksum", "bad_length", "unknown_command",
                "wrong_mode", "out_of_range", "electrode_errors", "keepalive_lapses", "pulses", "unbalanced_pulses")


@dataclass(frozen=True)
class ChannelCommand:
    """Stimulation of stimulator channel ``channel`` (1..8) from now on, as the envelope of its pulse shape
    (:mod:`drivers.stimulators.p24.pulse`); ``number`` is the packet number of the command behind it (-1: the
    device's own timing: ramp, keep-alive lapse, timeout, fault)."""
    channel: int
    pulse_width_us: float
    current_ma: float
    frequency_hz: float
    number: int


@dataclass(frozen=True)
class KeepAlive:
    """An accepted MlGetCurrentData."""
    number: int


@dataclass(frozen=True)
class Rejected:
    reason: str
    command: int | None


@dataclass(frozen=True)
class Notice:
    """Something the operator should read (keep-alive lapse, electrode error, unbalanced pulses)."""
    text: str


Event = Union[ChannelCommand, KeepAlive, Rejected, Notice]


@dataclass
class _MidChannel:
    """A mid-level channel enabled by the last accepted MlUpdate."""
    pulse: Pulse
    period_ms: float
    ramp: int
    enabled_s: float
    next_pulse_s: float        # device time of its next pulse (for counting unbalanced pulses)
    error: int = 0             # MlGetCurrentData nibble: 0 ok, 1 electrode error
    stopped: bool = False


@dataclass
class _Reply:
    """What a handler hands back: the reply's data and, for a refused command, the reject reason."""
    data: bytes
    reason: str | None = None


@dataclass
class _LowChannel:
    last_pulse_s: float | None = None
    live: bool = False          # a non-zero command is applied


@dataclass
class Settings:
    """Fixed device properties and the injected faults."""
    device_id: bytes = b"EMUP24-001"               # 10 ASCII characters
    firmware: tuple[int, int, int] = (1, 0, 0)
    keepalive_s: float = KEEPALIVE_S
    min_period_s: tuple[float, ...] = (0.1,) * N_CHANNELS   # low level: 1 / minimum frequency per channel
    fault_after_s: dict[int, float] = field(default_factory=dict)   # channel -> fault onset after its first
                                                                    # stimulation of >= 15 mA


class P24Emulator:
    """The device side of ScienceMode4 (spec "General layer", "Mid level", "Low level", "Results and states").

    - Every command frame gets exactly one reply with the request's packet number, in the complete layout
      also on error; unknown commands get UnknownCommand [11]; broken frames a GeneralError [1]; garbage
      before a frame nothing. No frame is ever sent unsolicited (spec "Packet numbers").
    - State rules: a level's command before its init, or an init while the other level is active, gets
      result 7; MlStop/LlStop end their own level and are answered 0 in every state; Reset stops all.
    - Stimulation goes out as :class:`ChannelCommand` events (spec "Mapping to stimulation"); the caller
      calls :meth:`poll` regularly for the device-timed part: the keep-alive, ramps, low-level timeouts,
      injected electrode faults and incomplete frames.
    """

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or Settings()
        if len(self.settings.device_id) != 10 or len(self.settings.min_period_s) != N_CHANNELS:
            raise ValueError("device_id must be 10 bytes and min_period_s hold one value per channel")
        self.counters = dict.fromkeys(COUNTER_KEYS, 0)
        self._parser = FrameParser()
        self._handlers = {
            CMD_GET_STIM_STATUS: self._on_stim_status, CMD_GET_DEVICE_ID: self._on_device_id,
            CMD_GET_EXTENDED_VERSION: self._on_version, CMD_RESET: self._on_reset,
            CMD_ML_INIT: self._on_ml_init, CMD_ML_UPDATE: self._on_ml_update,
            CMD_ML_GET_CURRENT_DATA: self._on_ml_current_data, CMD_ML_STOP: self._on_ml_stop,
            CMD_LL_INIT: self._on_ll_init, CMD_LL_CHANNEL_CONFIG: self._on_ll_config, CMD_LL_STOP: self._on_ll_stop,
        }
        self._fault_onset: dict[int, float] = {}
        self._unbalanced_seen: set[int] = set()
        self._fault_seen: set[int] = set()
        self.status = STATUS_NONE
        self._applied = {n: ZERO for n in range(1, N_CHANNELS + 1)}   # last triple sent per channel
        self._mid: dict[int, _MidChannel] = {}
        self._low = {n: _LowChannel() for n in range(1, N_CHANNELS + 1)}
        self._stop_all = False
        self._keepalive_s: float | None = None
        self._measurement = 0
        self._hv_off = False
        self._busy_until = 0.0

    # -- input ------------------------------------------------------------------------------------------
    def receive(self, chunk: bytes, now_s: float) -> tuple[list[bytes], list[Event]]:
        """Parse ``chunk``; return (reply frames, one write each; events for the caller)."""
        replies: list[bytes] = []
        events: list[Event] = []
        for item in self._parser.feed(chunk, now_s):
            reply = self._frame_error(item, events) if isinstance(item, FrameError) else self._command(
                item, now_s, events)
            if reply is not None:
                replies.append(reply)
                self.counters["replies_out"] += 1
        return replies, events

    def poll(self, now_s: float) -> tuple[list[bytes], list[Event]]:
        """The device's own timing up to ``now_s``: incomplete frames, keep-alive, ramps, timeouts, faults."""
        events: list[Event] = []
        replies = [r for r in (self._frame_error(e, events) for e in self._parser.expire(now_s)) if r is not None]
        self.counters["replies_out"] += len(replies)
        if self.status == STATUS_MID_LEVEL_RUNNING:
            self._poll_mid(now_s, events)
        self._poll_low(now_s, events)
        return replies, events

    def _frame_error(self, error: FrameError, events: list[Event]) -> bytes | None:
        """Spec "Errors": GeneralError [1] with the frame's number if readable (0 if not); garbage: none."""
        self._reject(events, error.reason, None)
        if error.number is None:
            return None
        return encode_frame(error.number, CMD_GENERAL_ERROR, bytes((RESULT_TRANSFER_ERROR,)))

    def _command(self, frame: Frame, now_s: float, events: list[Event]) -> bytes:
        self.counters["frames_in"] += 1
        handler = self._handlers.get(frame.command)
        if handler is None:      # spec "General layer": UnknownCommand [11] instead of the reply
            self._reject(events, "unknown_command", frame.command)
            return encode_frame(frame.number, CMD_UNKNOWN_COMMAND, bytes((RESULT_INVALID_COMMAND,)))
        reply = handler(frame, now_s, events)
        if reply.reason is not None:
            self._reject(events, reply.reason, frame.command)
        return encode_frame(frame.number, frame.command + 1, reply.data)

    def _reject(self, events: list[Event], reason: str, command: int | None) -> None:
        self.counters[reason] += 1
        events.append(Rejected(reason, command))

    # -- general layer (spec "General layer") ---------------------------------------------------------
    def _hv_level(self) -> int:
        """On while a level is initialised (unless LlInit switched it off), off otherwise."""
        off = self.status == STATUS_NONE or (self.status == STATUS_LOW_LEVEL and self._hv_off)
        return HV_LEVEL_OFF if off else HV_LEVEL_ON

    def _on_stim_status(self, frame: Frame, now_s: float, events: list[Event]) -> _Reply:
        return self._no_data(frame, bytes((self.status, self._hv_level())))

    def _on_device_id(self, frame: Frame, now_s: float, events: list[Event]) -> _Reply:
        return self._no_data(frame, self.settings.device_id)

    def _on_version(self, frame: Frame, now_s: float, events: list[Event]) -> _Reply:
        """Firmware version, ScienceMode 4.0.0, hash 0 of type 0 (none), not valid: 13 bytes."""
        return self._no_data(frame, bytes((*self.settings.firmware, 4, 0, 0, 0, 0, 0, 0, 0, 0)))

    def _on_reset(self, frame: Frame, now_s: float, events: list[Event]) -> _Reply:
        """Spec "General layer": stop all stimulation, status 0."""
        if frame.data:
            return _Reply(bytes((RESULT_PARAMETER_ERROR,)), "bad_length")
        self._stop_mid(now_s, events)
        self._stop_low(events)
        self.status = STATUS_NONE
        return _Reply(bytes((RESULT_OK,)))

    @staticmethod
    def _no_data(frame: Frame, layout: bytes) -> _Reply:
        """A command without data: result 0 and ``layout``; data sent along: result 2, same layout."""
        if frame.data:
            return _Reply(bytes((RESULT_PARAMETER_ERROR,)) + layout, "bad_length")
        return _Reply(bytes((RESULT_OK,)) + layout)

    # -- mid level (spec "Mid level") ------------------------------------------------------------------
    def _on_ml_init(self, frame: Frame, now_s: float, events: list[Event]) -> _Reply:
        """1 byte, bit 0 = stop all channels on any channel error. Refused (7) while low level is active."""
        if self.status == STATUS_LOW_LEVEL:
            return _Reply(bytes((RESULT_NOT_INITIALISED,)), "wrong_mode")
        if len(frame.data) != 1:
            return _Reply(bytes((RESULT_PARAMETER_ERROR,)), "bad_length")
        if frame.data[0] > 1:
            return _Reply(bytes((RESULT_PARAMETER_ERROR,)), "out_of_range")
        self._stop_mid(now_s, events)
        self._stop_all = bool(frame.data[0])
        self.status = STATUS_MID_LEVEL
        return _Reply(bytes((RESULT_OK,)))

    def _on_ml_update(self, frame: Frame, now_s: float, events: list[Event]) -> _Reply:
        """Starts or replaces the stimulation (status 3); a refused update leaves the running one as it is."""
        if self.status not in (STATUS_MID_LEVEL, STATUS_MID_LEVEL_RUNNING):
            return _Reply(bytes((RESULT_NOT_INITIALISED,)), "wrong_mode")
        parsed = parse_ml_update(frame.data)
        if isinstance(parsed, str):
            return _Reply(bytes((RESULT_PARAMETER_ERROR,)), parsed)
        self._count_mid_pulses(now_s, events)
        for n in [n for n in self._mid if n not in parsed]:
            del self._mid[n]
            self._send(n, ZERO, frame.number, events, force=False)
        for n, (pulse, period_ms, ramp) in parsed.items():
            self._enable_mid(n, pulse, period_ms, ramp, now_s)
        if self.status == STATUS_MID_LEVEL:
            self._keepalive_s = now_s       # the keep-alive clock starts with the stimulation
        self.status = STATUS_MID_LEVEL_RUNNING
        self._check_faults(now_s, events)
        for n in parsed:
            self._send(n, self._mid_triple(n, now_s), frame.number, events, force=True)
        return _Reply(bytes((RESULT_OK,)))

    def _enable_mid(self, n: int, pulse: Pulse, period_ms: float, ramp: int, now_s: float) -> None:
        old = self._mid.get(n)
        if old is None or old.stopped:
            self._mid[n] = _MidChannel(pulse, period_ms, ramp, now_s, now_s)
        else:        # already running: the new shape from the next pulse on, ramp and timing go on
            old.pulse, old.period_ms, old.ramp = pulse, period_ms, ramp
        self._note_stimulation(n, pulse.peak_ma, now_s)

    def _on_ml_current_data(self, frame: Frame, now_s: float, events: list[Event]) -> _Reply:
        """Selection 4: result, selection, active mask, one error nibble per channel (4 bytes). Restarts the
        keep-alive (spec "Mid level")."""
        selection = frame.data[0] if frame.data else 0
        if self.status not in (STATUS_MID_LEVEL, STATUS_MID_LEVEL_RUNNING):
            return _Reply(bytes((RESULT_NOT_INITIALISED, selection, 0, 0, 0, 0, 0)), "wrong_mode")
        if len(frame.data) != 1:
            return _Reply(bytes((RESULT_PARAMETER_ERROR, selection, 0, 0, 0, 0, 0)), "bad_length")
        if selection != 4:
            return _Reply(bytes((RESULT_PARAMETER_ERROR, selection, 0, 0, 0, 0, 0)), "out_of_range")
        self._poll_mid(now_s, events)        # a lapse that is due happens before the keep-alive
        if self.status == STATUS_MID_LEVEL_RUNNING:
            self._keepalive_s = now_s
        events.append(KeepAlive(frame.number))
        mask = sum(1 << (n - 1) for n, ch in self._mid.items() if not ch.stopped)
        nibbles = sum(ch.error << (4 * (n - 1)) for n, ch in self._mid.items())
        return _Reply(bytes((RESULT_OK, 4, mask)) + nibbles.to_bytes(4, "little"))

    def _on_ml_stop(self, frame: Frame, now_s: float, events: list[Event]) -> _Reply:
        """Answered 0 in every state; ends the mid level (status 0) when it is active."""
        if frame.data:
            return _Reply(bytes((RESULT_PARAMETER_ERROR,)), "bad_length")
        if self.status in (STATUS_MID_LEVEL, STATUS_MID_LEVEL_RUNNING):
            self._stop_mid(now_s, events)
            self.status = STATUS_NONE
        return _Reply(bytes((RESULT_OK,)))

    def _mid_triple(self, n: int, now_s: float) -> tuple[float, float, float]:
        """(pulse width, current, frequency) of mid-level channel n now: ramped, zero when stopped or faulted."""
        ch = self._mid[n]
        if ch.stopped or self._faulted(n, now_s) or ch.pulse.current_ma == 0:
            return ZERO
        return ch.pulse.pulse_width_us, ch.pulse.current_ma * self._ramp_level(ch, now_s), 1000.0 / ch.period_ms

    @staticmethod
    def _ramp_level(ch: _MidChannel, now_s: float) -> float:
        """Spec "Mid level", ramp: pulse k (1..ramp) after enabling runs at k / (ramp + 1) of the current."""
        if ch.ramp == 0:
            return 1.0
        k = 1 + math.floor((now_s - ch.enabled_s) * 1000.0 / ch.period_ms + 1e-9)
        return min(1.0, k / (ch.ramp + 1))

    def _poll_mid(self, now_s: float, events: list[Event]) -> None:
        """Keep-alive lapse (spec "Mid level": stop, report the channels inactive and status 2), faults, ramps."""
        self._count_mid_pulses(now_s, events)
        if self._keepalive_s is not None and now_s - self._keepalive_s > self.settings.keepalive_s:
            self.counters["keepalive_lapses"] += 1
            events.append(Notice(f"mid-level keep-alive lapsed (no MlGetCurrentData for "
                                 f"{self.settings.keepalive_s:g} s): stimulation stopped"))
            self._stop_mid(now_s, events)
            self.status = STATUS_MID_LEVEL
            return
        self._check_faults(now_s, events)
        for n in self._mid:
            self._send(n, self._mid_triple(n, now_s), -1, events, force=False)

    def _check_faults(self, now_s: float, events: list[Event]) -> None:
        """An injected electrode fault is detected on a running channel at >= 15 mA: that channel stops with
        error nibble 1, or every channel if MlInit asked to stop all (spec "Errors and electrode faults")."""
        for n, ch in self._mid.items():
            if ch.stopped or not self._faulted(n, now_s) or ch.pulse.peak_ma < ELECTRODE_DETECT_MA:
                continue
            ch.error, ch.stopped = 1, True
            self._electrode_error(n, events)
            if self._stop_all:
                for other in self._mid.values():
                    other.stopped = True

    def _stop_mid(self, now_s: float, events: list[Event]) -> None:
        self._count_mid_pulses(now_s, events)
        for n in self._mid:
            self._send(n, ZERO, -1, events, force=False)
        self._mid.clear()
        self._keepalive_s = None

    def _count_mid_pulses(self, now_s: float, events: list[Event]) -> None:
        """Count the device-timed pulses each running channel has delivered up to ``now_s``."""
        for n, ch in self._mid.items():
            if ch.stopped or now_s < ch.next_pulse_s:
                continue
            period_s = ch.period_ms / 1000.0
            k = math.floor((now_s - ch.next_pulse_s) / period_s) + 1
            ch.next_pulse_s += k * period_s
            self._count_pulses(n, ch.pulse, k, events)

    # -- low level (spec "Low level") ------------------------------------------------------------------
    def _on_ll_init(self, frame: Frame, now_s: float, events: list[Event]) -> _Reply:
        """1 byte: bits 3-1 high-voltage level (1 = off), bits 6-4 measurement 0..3, bits 0 and 7 zero."""
        if self.status in (STATUS_MID_LEVEL, STATUS_MID_LEVEL_RUNNING):
            return _Reply(bytes((RESULT_NOT_INITIALISED,)), "wrong_mode")
        if len(frame.data) != 1:
            return _Reply(bytes((RESULT_PARAMETER_ERROR,)), "bad_length")
        value = frame.data[0]
        if value & 0x81 or (value >> 4) & 0x7 > 3:
            return _Reply(bytes((RESULT_PARAMETER_ERROR,)), "out_of_range")
        self._stop_low(events)
        self._measurement, self._hv_off = (value >> 4) & 0x7, (value >> 1) & 0x7 == 1
        self.status = STATUS_LOW_LEVEL
        return _Reply(bytes((RESULT_OK,)))

    def _on_ll_config(self, frame: Frame, now_s: float, events: list[Event]) -> _Reply:
        """One pulse per config with the execute bit (spec "Low level"); reply: result, connector·16 + colour,
        measurement type, and with a measurement its sampling time and 128 samples."""
        head = frame.data[0] if frame.data else 0
        n = 1 + ((head >> 4) & 1) * 4 + ((head >> 5) & 3)
        if self.status != STATUS_LOW_LEVEL:
            return _Reply(self._ll_ack(RESULT_NOT_INITIALISED, head, 0), "wrong_mode")
        count = (head & 0xF) + 1
        execute = bool(head & 0x80)
        if not frame.data or (len(frame.data) != 1 + POINT_SIZE * count and (execute or len(frame.data) != 1)):
            return _Reply(self._ll_ack(RESULT_PARAMETER_ERROR, head, self._measurement), "bad_length")
        if not execute:                      # the device ignores the points (spec "Low level")
            return _Reply(self._ll_ack(RESULT_OK, head, self._measurement))
        points = decode_points(frame.data[1:], count)
        if points is None or max(abs(p.current_ma) for p in points) > MAX_CURRENT_MA:
            return _Reply(self._ll_ack(RESULT_PARAMETER_ERROR, head, self._measurement), "out_of_range")
        pulse = Pulse(points)
        result, triple = self._ll_pulse(n, pulse, now_s, events)
        self._send(n, triple, frame.number, events, force=True)
        flowing = pulse if triple != ZERO else None
        return _Reply(self._ll_ack(result, head, self._measurement, flowing, self._high_voltage_v()))

    def _ll_pulse(self, n: int, pulse: Pulse, now_s: float, events: list[Event]) -> tuple[int, tuple]:
        """Run one pulse on channel n: (result, stimulation triple). The device runs queued pulses one after
        the other, so a pulse starts once the one before it has ended. Every pulse that flows is stimulation
        at 1 / the time since the channel's previous pulse, however long ago that was, so the loop's frequency
        limits see its true rate; only the first pulse since the level started has no rate and counts as one
        pulse at the minimum frequency. A pulse holds its channel for the minimum-frequency period, so with
        the channel's own minimum frequency there a pulse slower than it is rejected, or clamped to exactly
        one pulse, never left uncounted."""
        start = max(now_s, self._busy_until)
        self._busy_until = start + pulse.duration_us * 1e-6
        self._count_pulses(n, pulse, 1, events)
        self._note_stimulation(n, pulse.peak_ma, start)
        ch = self._low[n]
        previous, ch.last_pulse_s = ch.last_pulse_s, start
        if self._faulted(n, start):
            ch.last_pulse_s = None
            if pulse.peak_ma >= ELECTRODE_DETECT_MA:
                self._electrode_error(n, events)
                return RESULT_ELECTRODE_ERROR, ZERO
            return RESULT_OK, ZERO
        if self._hv_off or pulse.current_ma == 0:
            return RESULT_OK, ZERO
        period_s = self.settings.min_period_s[n - 1] if previous is None else start - previous
        return RESULT_OK, (pulse.pulse_width_us, pulse.current_ma, 1.0 / period_s)

    def _ll_ack(self, result: int, head: int, measurement: int, pulse: Pulse | None = None,
                high_voltage_v: float = 0.0) -> bytes:
        """LlChannelConfig reply layout, complete also on error (zero samples)."""
        out = bytes((result, ((head >> 4) & 1) * 16 + ((head >> 5) & 3), measurement))
        if measurement == 0:
            return out
        return out + measurement_samples(pulse, measurement, high_voltage_v)

    def _high_voltage_v(self) -> float:
        return 0.0 if self._hv_off else HIGH_VOLTAGE_V

    def _on_ll_stop(self, frame: Frame, now_s: float, events: list[Event]) -> _Reply:
        """Answered 0 in every state; ends the low level (status 0) when it is active."""
        if frame.data:
            return _Reply(bytes((RESULT_PARAMETER_ERROR,)), "bad_length")
        if self.status == STATUS_LOW_LEVEL:
            self._stop_low(events)
            self.status = STATUS_NONE
        return _Reply(bytes((RESULT_OK,)))

    def _poll_low(self, now_s: float, events: list[Event]) -> None:
        """A channel whose next pulse does not come within its minimum-frequency period goes to zero."""
        for n, ch in self._low.items():
            if ch.live and now_s - ch.last_pulse_s > self.settings.min_period_s[n - 1]:
                self._send(n, ZERO, -1, events, force=False)

    def _stop_low(self, events: list[Event]) -> None:
        for n, ch in self._low.items():
            self._send(n, ZERO, -1, events, force=False)
            ch.last_pulse_s = None
        self._busy_until = 0.0

    # -- shared ----------------------------------------------------------------------------------------
    def _send(self, n: int, triple: tuple[float, float, float], number: int, events: list[Event],
              force: bool) -> None:
        """A ChannelCommand for channel n when ``force`` or when it changes what the channel applies."""
        if force or triple != self._applied[n]:
            self._applied[n] = triple
            events.append(ChannelCommand(n, *triple, number))
        self._low[n].live = triple != ZERO and self.status == STATUS_LOW_LEVEL

    def _note_stimulation(self, n: int, peak_ma: float, now_s: float) -> None:
        """The injected fault of channel n starts ``fault_after_s`` after its first pulse of >= 15 mA."""
        after = self.settings.fault_after_s.get(n)
        if after is not None and n not in self._fault_onset and peak_ma >= ELECTRODE_DETECT_MA:
            self._fault_onset[n] = now_s + after

    def _faulted(self, n: int, now_s: float) -> bool:
        onset = self._fault_onset.get(n)
        return onset is not None and now_s >= onset

    def _electrode_error(self, n: int, events: list[Event]) -> None:
        """Count a detected electrode error (said once per channel: low level detects one per pulse)."""
        self.counters["electrode_errors"] += 1
        if n not in self._fault_seen:
            self._fault_seen.add(n)
            events.append(Notice(f"channel {n}: electrode error (injected fault): its stimulation stopped"))

    def _count_pulses(self, n: int, pulse: Pulse, k: int, events: list[Event]) -> None:
        """Count ``k`` pulses of ``pulse`` on channel n; charge-unbalanced ones separately (and say so once
        per channel)."""
        self.counters["pulses"] += k
        if pulse.balanced or pulse.peak_ma == 0:
            return
        self.counters["unbalanced_pulses"] += k
        if n not in self._unbalanced_seen:
            self._unbalanced_seen.add(n)
            events.append(Notice(f"channel {n}: charge-unbalanced pulses (net charge "
                                                f"{pulse.net_charge_nc:g} nC per pulse)"))
