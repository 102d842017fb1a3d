"""ScienceMode2 (Hasomed RehaStim2): the device side of the protocol, as pure Python.

Everything follows the ScienceMode2 protocol as its Python client pysciencemode 1.1.5 uses it ("the spec":
Hasomed's RehaStim2 ScienceMode2 description, summarised in README "Serial"); section names below are the
spec's. The frame codec, its byte conventions and the protocol's constants are in
:mod:`drivers.stimulators.rehastim2.codec`; this module is the emulated device (:class:`Rehastim2Emulator`) and the
events it reports. No I/O, no threads, no clocks: the caller passes the time in and writes the returned
frames, so the same inputs always give the same outputs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from drivers.stimulators.rehastim2.codec import (
    AMBIGUOUS_COUNTERS,
    CMD_GET_MODE,
    CMD_GET_MODE_ACK,
    CMD_INIT,
    CMD_INIT_ACK,
    CMD_INIT_CLM,
    CMD_INIT_CLM_ACK,
    CMD_START_CLM,
    CMD_START_CLM_ACK,
    CMD_STOP_CLM,
    CMD_STOP_CLM_ACK,
    CMD_UNKNOWN,
    CMD_WATCHDOG,
    HEADER_SIZE,
    MODE_INITIALISED,
    MODE_RUNNING,
    MODE_START,
    RESULT_OK,
    RESULT_PARAMETER_ERROR,
    RESULT_TRANSFER_ERROR,
    RESULT_WRONG_MODE,
    Frame,
    FrameError,
    FrameParser,
    decode_payload,
    encode_frame,
)

COUNTER_KEYS = ("frames_in", "replies_out", "watchdogs", "inits_sent", "bad_frame", "bad_checksum",
                "bad_length", "unknown_command", "wrong_mode", "out_of_range")


@dataclass(frozen=True)
class ChannelSetting:
    channel: int          # 1..8
    mode: int             # 0 single, 1 doublet, 2 triplet
    pulse_width_us: int
    amplitude_ma: int


@dataclass(frozen=True)
class Stimulation:
    """Applied stimulation: InitChannelListMode timing + StartChannelListMode channels (spec "Commands")."""
    channels: tuple[ChannelSetting, ...]   # every active channel, ascending
    period_ms: float                       # main stimulation interval T
    inter_pulse_interval_ms: float
    low_frequency_factor: int
    low_frequency_mask: int
    counter: int                           # COUNTER of the StartChannelListMode frame (decoded)

    @property
    def frequency_hz(self) -> float:
        return 1000.0 / self.period_ms


@dataclass(frozen=True)
class Connected:
    counter: int


@dataclass(frozen=True)
class StimulationChanged:
    stimulation: Stimulation | None


@dataclass(frozen=True)
class Rejected:
    reason: str
    command: int | None


@dataclass(frozen=True)
class Activity:
    """A Watchdog arrived."""


Event = Union[Connected, StimulationChanged, Rejected, Activity]


@dataclass(frozen=True)
class _ChannelList:
    channels: tuple[int, ...]
    period_ms: float
    inter_pulse_interval_ms: float
    low_frequency_factor: int
    low_frequency_mask: int


class Rehastim2Emulator:
    """The device side of ScienceMode2 (spec "Commands" and "What the client does").

    - :meth:`poll` sends Init (data [version]) immediately and then every ``init_resend_s`` until a
      matching InitAck (step 1). Init counters skip 00, the stuffing set and its XOR-55 images, so the
      client's echo is unambiguous; an InitAck must carry the counter of the *last* Init.
    - Every command gets exactly one reply, with the request's COUNTER (step 3); Watchdog and InitAck
      get none. Every reply has at least one data byte (step 2; UnknownCommand carries the unknown id).
    - Commands before InitAck are served normally but do not make the link "connected".
    - Frame-level errors (bad structure, CRC or LEN) are counted and reported as ``Rejected(reason,
      None)`` but get **no reply**: the command cannot be trusted, and the client times out or resends.
      Command-level problems get the negative result of step 6 (−2 for a bad data length or value,
      −3 for the wrong mode) or UnknownCommand.
    - Stop is always honoured with result 0 (also in the start mode, where the client sends it first).
    - The emulator has no timeout of its own: the caller compares ``last_activity_s`` with its timeout
      (step 4) and calls :meth:`reset` when the client is gone.
    """

    def __init__(self, version: int = 1, n_channels: int = 8, max_pulse_width_us: int = 500,
                 max_amplitude_ma: int = 130, min_period_ms: float = 8.0, max_period_ms: float = 1025.0,
                 init_resend_s: float = 0.2) -> None:
        if not 0 <= version <= 255 or not 1 <= n_channels <= 8 or init_resend_s <= 0:
            raise ValueError("version 0..255, n_channels 1..8 and init_resend_s > 0 required")
        if not 0 < min_period_ms <= max_period_ms:
            raise ValueError("0 < min_period_ms <= max_period_ms required")
        self.version, self.n_channels = version, n_channels
        self.max_pulse_width_us, self.max_amplitude_ma = max_pulse_width_us, max_amplitude_ma
        self.min_period_ms, self.max_period_ms = min_period_ms, max_period_ms
        self.init_resend_s = init_resend_s
        self.counters = dict.fromkeys(COUNTER_KEYS, 0)
        self._parser = FrameParser()
        self._init_counter: int | None = None      # counter of the last Init sent
        self._previous_init_counter: int | None = None
        self._handlers = {
            CMD_INIT_ACK: self._on_init_ack, CMD_WATCHDOG: self._on_watchdog,
            CMD_GET_MODE: self._on_get_mode, CMD_INIT_CLM: self._on_init_clm,
            CMD_START_CLM: self._on_start_clm, CMD_STOP_CLM: self._on_stop_clm,
        }
        self.reset()

    def reset(self) -> None:
        """Client gone: not connected, start mode, no stimulation, Init resent at the next poll()."""
        self.connected = False
        self.mode = MODE_START
        self.stimulation: Stimulation | None = None
        self.last_activity_s: float | None = None
        self._channel_list: _ChannelList | None = None
        self._last_init_s: float | None = None
        self._parser.reset()

    def poll(self, now_s: float) -> list[bytes]:
        """Frames to write now: an Init while not connected, at most every ``init_resend_s``."""
        if self.connected or (self._last_init_s is not None
                              and now_s - self._last_init_s < self.init_resend_s - 1e-9):
            return []
        counter = 0 if self._init_counter is None else self._init_counter
        counter = (counter + 1) % 256
        while counter in AMBIGUOUS_COUNTERS:
            counter = (counter + 1) % 256
        # an InitAck may answer the Init sent just before this one: both counters are accepted
        self._previous_init_counter = self._init_counter
        self._init_counter, self._last_init_s = counter, now_s
        self.counters["inits_sent"] += 1
        return [encode_frame(counter, CMD_INIT, bytes((self.version,)))]

    def receive(self, chunk: bytes, now_s: float) -> tuple[list[bytes], list[Event]]:
        """Parse ``chunk``; return (reply frames, one write() each; events for the caller)."""
        replies: list[bytes] = []
        events: list[Event] = []
        for item in self._parser.feed(chunk):
            if isinstance(item, FrameError):
                self._reject(events, item.reason, None)
                reply = self._transfer_error(item)
                if reply is not None:
                    replies.append(reply)
                    self.counters["replies_out"] += 1
                continue
            self.counters["frames_in"] += 1
            self.last_activity_s = now_s
            handler = self._handlers.get(item.command)
            if handler is None:
                self._reject(events, "unknown_command", item.command)
                reply = encode_frame(item.counter, CMD_UNKNOWN, bytes((item.command,)))
            else:
                reply = handler(item, events)
            if reply is not None:
                replies.append(reply)
                self.counters["replies_out"] += 1
        return replies, events

    # -- helpers -----------------------------------------------------------------------------------------
    _ACKS = {CMD_GET_MODE: CMD_GET_MODE_ACK, CMD_INIT_CLM: CMD_INIT_CLM_ACK, CMD_START_CLM: CMD_START_CLM_ACK,
             CMD_STOP_CLM: CMD_STOP_CLM_ACK}

    def _transfer_error(self, error: FrameError) -> bytes | None:
        """Spec step 6: a complete frame with a bad CRC whose command byte is still readable gets its
        acknowledgement with result -1 (transfer error); frames without a readable command get none."""
        raw = error.raw
        if error.reason != "bad_checksum" or len(raw) < HEADER_SIZE + 3:
            return None
        head = decode_payload(raw[HEADER_SIZE:HEADER_SIZE + 2])
        if head is None or head.command not in self._ACKS:
            return None
        return encode_frame(head.counter, self._ACKS[head.command], bytes((RESULT_TRANSFER_ERROR & 0xFF,)))

    def _reject(self, events: list[Event], reason: str, command: int | None) -> None:
        self.counters[reason] += 1
        events.append(Rejected(reason, command))

    @staticmethod
    def _reply(frame: Frame, command: int, *values: int) -> bytes:
        return encode_frame(frame.counter, command, bytes(v & 0xFF for v in values))

    def _fail(self, frame: Frame, events: list[Event], ack: int, result: int, reason: str) -> bytes:
        self._reject(events, reason, frame.command)
        return self._reply(frame, ack, result)

    # -- commands (spec "Commands") ----------------------------------------------------------------------
    def _on_init_ack(self, frame: Frame, events: list[Event]) -> None:
        if len(frame.data) != 1:
            self._reject(events, "bad_length", frame.command)
        elif frame.data[0] != 0 or frame.counter not in (self._init_counter, self._previous_init_counter):
            self._reject(events, "out_of_range", frame.command)
        elif not self.connected:
            self.connected = True
            events.append(Connected(frame.counter))

    def _on_watchdog(self, frame: Frame, events: list[Event]) -> None:
        self.counters["watchdogs"] += 1
        events.append(Activity())

    def _on_get_mode(self, frame: Frame, events: list[Event]) -> bytes:
        return self._reply(frame, CMD_GET_MODE_ACK, RESULT_OK, self.mode)

    def _on_init_clm(self, frame: Frame, events: list[Event]) -> bytes:
        """InitChannelListMode: [lf factor, active mask, lf mask, IPI code, T MSB, T LSB, 0]."""
        ack = CMD_INIT_CLM_ACK
        if self.mode == MODE_RUNNING:
            return self._fail(frame, events, ack, RESULT_WRONG_MODE, "wrong_mode")
        if len(frame.data) != 7:
            return self._fail(frame, events, ack, RESULT_PARAMETER_ERROR, "bad_length")
        lf_factor, active, lf_mask, ipi_code, msb, lsb, last = frame.data
        ipi_ms = ipi_code / 2 + 1.5
        period_ms = (msb * 256 + lsb) / 2 + 1
        existing = (1 << self.n_channels) - 1
        if not (lf_factor <= 7 and active and not active & ~existing and not lf_mask & ~active
                and 2 <= ipi_ms <= 129 and self.min_period_ms <= period_ms <= self.max_period_ms
                and last == 0):
            return self._fail(frame, events, ack, RESULT_PARAMETER_ERROR, "out_of_range")
        channels = tuple(ch for ch in range(1, self.n_channels + 1) if active >> (ch - 1) & 1)
        self._channel_list = _ChannelList(channels, period_ms, ipi_ms, lf_factor, lf_mask)
        self.mode, self.stimulation = MODE_INITIALISED, None
        events.append(StimulationChanged(None))
        return self._reply(frame, ack, RESULT_OK)

    def _on_start_clm(self, frame: Frame, events: list[Event]) -> bytes:
        """StartChannelListMode: [mode, PW MSB, PW LSB, amplitude] per active channel, ascending."""
        ack, config = CMD_START_CLM_ACK, self._channel_list
        if self.mode == MODE_START or config is None:
            return self._fail(frame, events, ack, RESULT_WRONG_MODE, "wrong_mode")
        if len(frame.data) != 4 * len(config.channels):
            return self._fail(frame, events, ack, RESULT_PARAMETER_ERROR, "bad_length")
        settings = []
        for i, channel in enumerate(config.channels):
            mode, pw_msb, pw_lsb, amplitude = frame.data[4 * i:4 * i + 4]
            pulse_width = pw_msb * 256 + pw_lsb
            if mode > 2 or pulse_width > self.max_pulse_width_us or amplitude > self.max_amplitude_ma:
                return self._fail(frame, events, ack, RESULT_PARAMETER_ERROR, "out_of_range")
            settings.append(ChannelSetting(channel, mode, pulse_width, amplitude))
        self.stimulation = Stimulation(tuple(settings), config.period_ms, config.inter_pulse_interval_ms,
                                       config.low_frequency_factor, config.low_frequency_mask, frame.counter)
        self.mode = MODE_RUNNING
        events.append(StimulationChanged(self.stimulation))
        return self._reply(frame, ack, RESULT_OK)

    def _on_stop_clm(self, frame: Frame, events: list[Event]) -> bytes:
        if self.mode != MODE_START:
            events.append(StimulationChanged(None))
        self.mode, self.stimulation, self._channel_list = MODE_START, None, None
        return self._reply(frame, CMD_STOP_CLM_ACK, RESULT_OK)
