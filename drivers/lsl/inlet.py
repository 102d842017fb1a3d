"""The controller's LSL stream, the inlet of the ``lsl`` driver (used in its link process).

**Resolution.** By the config's stream ``name``, ``type`` and ``source_id`` (an XPath predicate), one attempt
at most every RESOLVE_INTERVAL_S, until a stream with the expected layout answers: ``3 x channels`` float32
values per sample, ``[current_ma, pulse_width_us, frequency_hz]`` per ``[[stimulation.channel]]`` in their
order. A matching stream with another channel count or format is refused: one red line on stderr naming what
was expected, one ``wrong_stream`` reject, a ``controller_refused`` marker; it is not looked at again.
An attempt waits for a second matching stream too: when more than one with the expected layout answers
(two decoders of the same name and type), none is used, since which of them drives the stimulation
would be chance: one red line naming each one's source_id and host, one ``wrong_stream`` reject and a
``controller_ambiguous`` marker per new set of streams, and resolution goes on until only one matches
(``[driver.inlet] source_id`` selects one). A stream that appears after the inlet connected is not seen.

**Samples.** Each pull takes what arrived. A sample with a NaN or infinite value is rejected as
``non_finite``, one with a value outside COMMAND_RANGES as ``out_of_range`` (counted like bad frames and
never applied). The newest valid sample of a pull goes to the loop as one channel command per channel,
pushed at once, so the loop only ever sees whole samples; older valid samples of the same pull are
superseded (counted). A lost stream (its outlet gone) sets every channel to zero, shows as
disconnected, and is resolved again.
"""
from __future__ import annotations

import sys
import time

import numpy as np

from drivers.core.contract import KIND_CHANNEL, KIND_EXCITATION
from drivers.ipc.link import LINK_RECORD, Inbound
from drivers.lsl.streams import COMMAND_RANGES, STIM_FIELDS

RESOLVE_INTERVAL_S = 0.5     # between resolution attempts while no stream is connected
RESOLVE_TIMEOUT_S = 1.0      # one attempt waits this long for answers (returns at the first match)
OPEN_TIMEOUT_S = 1.0         # connecting to a resolved stream
MAX_CHUNK = 256              # samples one pull takes at most
AUX_SUPERSEDED, AUX_DROPPED = 5, 6   # inbound aux words (free in drivers.ipc.link): valid samples not applied


def red_line(text: str) -> None:
    """One line on stderr, bold red on a terminal."""
    print(f"\x1b[1;31m{text}\x1b[0m" if sys.stderr.isatty() else text, file=sys.stderr, flush=True)


def format_name(pylsl, fmt: int) -> str:
    """An LSL channel format's name ('float32', 'double64', ...)."""
    names = {pylsl.cf_float32: "float32", pylsl.cf_double64: "double64", pylsl.cf_string: "string",
             pylsl.cf_int32: "int32", pylsl.cf_int16: "int16", pylsl.cf_int8: "int8", pylsl.cf_int64: "int64"}
    return names.get(fmt, f"format {fmt}")


class CommandInlet:
    """Resolves, checks and reads the controller's stream; hands whole samples to the link's inbound ring.

    ``events`` gets (LSL time, marker) pairs (a deque: appended here, drained by the outlets' thread)."""

    def __init__(self, pylsl, predicate: str, channel_names, events) -> None:
        self.pylsl, self.predicate, self.events = pylsl, predicate, events
        self.channel_names = tuple(channel_names)
        n = len(self.channel_names)
        self.n_values = len(STIM_FIELDS) * n
        self.lo = np.tile(np.array([r[0] for r in COMMAND_RANGES], np.float32), n)
        self.hi = np.tile(np.array([r[1] for r in COMMAND_RANGES], np.float32), n)
        self.buf = np.zeros((MAX_CHUNK, self.n_values), np.float32)
        self.records = np.zeros(n, LINK_RECORD)
        self.records["kind"] = KIND_CHANNEL
        self.records["index"] = np.arange(n)
        self.inlet = None
        self.refused: set[str] = set()      # uids of streams refused for their layout
        self.ambiguous: frozenset[str] = frozenset()    # uids of the streams last refused as a choice by chance
        self.seq = 0
        self._next_resolve = 0.0

    @property
    def expected(self) -> str:
        """What a controller's stream must be, for messages."""
        return (f"{self.n_values} float32 channels: [current_ma, pulse_width_us, frequency_hz] for each of the "
                f"{len(self.channel_names)} stimulation channels {', '.join(self.channel_names)}")

    def poll(self, inbound: Inbound, timeout_s: float) -> None:
        """Resolve (no stream yet) or read samples, waiting at most about ``timeout_s``."""
        if self.inlet is None:
            self._resolve(inbound, timeout_s)
        else:
            self._pull(inbound, timeout_s)

    def _event(self, text: str) -> None:
        self.events.append((self.pylsl.local_clock(), text))

    # -- resolution ----------------------------------------------------------------------------
    def _resolve(self, inbound: Inbound, timeout_s: float) -> None:
        wait = self._next_resolve - time.monotonic()
        if wait > 0:
            time.sleep(min(wait, timeout_s))
            return
        # one stream more than needed: a second one that matches makes the choice ambiguous
        found = self.pylsl.resolve_bypred(self.predicate, len(self.refused) + 2, RESOLVE_TIMEOUT_S)
        self._next_resolve = time.monotonic() + RESOLVE_INTERVAL_S
        usable = []
        for info in found:
            if info.uid() in self.refused:
                continue
            problem = self.layout_problem(info)
            if problem is not None:
                self._refuse(info, problem, inbound)
            else:
                usable.append(info)
        if len(usable) > 1:
            self._refuse_choice(usable, inbound)
        elif usable and self._open(usable[0], inbound):
            self.ambiguous = frozenset()

    def layout_problem(self, info) -> str | None:
        """Why a stream's layout is not a command stream's (None: it is)."""
        count, fmt = info.channel_count(), info.channel_format()
        if count == self.n_values and fmt == self.pylsl.cf_float32:
            return None
        return f"it has {count} {format_name(self.pylsl, fmt)} channels"

    def _refuse(self, info, problem: str, inbound: Inbound) -> None:
        self.refused.add(info.uid())
        inbound.reject(time.monotonic_ns(), "wrong_stream")
        red_line(f"hil link: refused LSL stream {info.name()!r} (type {info.type()!r}, host {info.hostname()}): "
                 f"{problem}; expected {self.expected}")
        self._event(f"controller_refused name={info.name()} channels={info.channel_count()} "
                    f"format={format_name(self.pylsl, info.channel_format())}")

    def _refuse_choice(self, infos: list, inbound: Inbound) -> None:
        """Several usable streams match: use none; report each new set of them once."""
        uids = frozenset(info.uid() for info in infos)
        if uids == self.ambiguous:
            return
        self.ambiguous = uids
        inbound.reject(time.monotonic_ns(), "wrong_stream")
        sources = [(info.source_id(), info.hostname()) for info in infos]
        red_line(f"hil link: refused {len(infos)} LSL streams that all match {self.predicate} (" +
                 ", ".join(f"source_id {sid!r} on host {host}" for sid, host in sources) +
                 "): which one drives the stimulation would be chance; set [driver.inlet] source_id to one of them "
                 "or stop the others")
        self._event(f"controller_ambiguous streams={len(infos)} sources=" +
                    ",".join(f"{sid}@{host}" for sid, host in sources))

    def _open(self, info, inbound: Inbound) -> bool:
        inlet = self.pylsl.StreamInlet(info, max_buflen=1, max_chunklen=1, recover=False)
        try:
            inlet.open_stream(OPEN_TIMEOUT_S)
        except RuntimeError:          # pylsl's timeout or lost error: gone again before we connected
            return False
        self.inlet = inlet
        inbound.set_connected(True)
        self._event(f"controller_connected name={info.name()} type={info.type()} host={info.hostname()}")
        return True

    # -- samples -------------------------------------------------------------------------------
    def _pull(self, inbound: Inbound, timeout_s: float) -> None:
        try:
            _, stamps = self.inlet.pull_chunk(timeout=timeout_s, max_samples=MAX_CHUNK, dest_obj=self.buf,
                                              min_samples=1)
        except RuntimeError:          # pylsl's LostError (the outlet is gone) or a failing inlet
            self._lost(inbound)
            return
        if stamps:
            now = time.monotonic_ns()
            inbound.count_in(len(stamps))
            self.take(self.buf[:len(stamps)], now, inbound)

    def take(self, samples: np.ndarray, now: int, inbound: Inbound) -> None:
        """Validate samples (rows) received at ``now``; push the newest valid one."""
        finite = np.isfinite(samples).all(axis=1)
        inside = ((samples >= self.lo) & (samples <= self.hi)).all(axis=1)     # False for NaN too
        for i in np.flatnonzero(~inside):
            inbound.reject(now, "out_of_range" if finite[i] else "non_finite")
        valid = np.flatnonzero(inside)
        if valid.size:
            inbound.ring.aux[AUX_SUPERSEDED] += valid.size - 1
            self._push(samples[valid[-1]], now, inbound)

    def _push(self, sample: np.ndarray, now: int, inbound: Inbound) -> None:
        """One channel command per channel, all in one ring push (or none: ring full, counted)."""
        r, v = self.records, sample.reshape(-1, len(STIM_FIELDS))
        r["receive_ns"], r["seq"] = now, self.seq
        r["values"][:, 0] = v[:, 1]        # the record's order: pulse width us, current mA, frequency Hz, mode
        r["values"][:, 1] = v[:, 0]
        r["values"][:, 2] = v[:, 2]
        self._send(inbound)

    def _send(self, inbound: Inbound) -> None:
        """The filled records to the loop in one ring push, the next sequence number taken (or none: ring full,
        counted)."""
        self.seq = (self.seq + 1) & 0x7FFFFFFF
        ring = inbound.ring
        if ring.capacity - ring.pending < self.records.shape[0]:
            ring.aux[AUX_DROPPED] += 1
            return
        ring.push_many(self.records, self.records.shape[0])

    def _lost(self, inbound: Inbound) -> None:
        """The stream is gone: every channel to zero, disconnected, resolve again."""
        self.close()
        self._push(np.zeros(self.n_values, np.float32), time.monotonic_ns(), inbound)
        inbound.set_connected(False)
        self._event("controller_lost")
        self._next_resolve = 0.0

    def close(self) -> None:
        if self.inlet is not None:
            self.inlet.close_stream()
            self.inlet = None


class ExcitationInlet(CommandInlet):
    """The inlet of a voluntary LSL source (``role = "voluntary"``, hil.rt.voluntary): one float32 excitation
    (0..1) per configured muscle group, in their order; the newest valid sample goes to the loop as one group
    excitation per group (index -1 - the group's position in the model), and a lost stream sends zeros (the
    patient lets go). Resolution, refusal and validation are the command inlet's."""

    def __init__(self, pylsl, predicate: str, groups, group_index, events) -> None:
        super().__init__(pylsl, predicate, (), events)
        self.channel_names = tuple(groups)
        self.n_values = len(self.channel_names)
        self.lo, self.hi = np.zeros(self.n_values, np.float32), np.ones(self.n_values, np.float32)
        self.buf = np.zeros((MAX_CHUNK, self.n_values), np.float32)
        self.records = np.zeros(self.n_values, LINK_RECORD)
        self.records["kind"] = KIND_EXCITATION
        self.records["index"] = -1 - np.asarray(group_index)

    @property
    def expected(self) -> str:
        return (f"{self.n_values} float32 channels: the excitation (0..1) of the muscle groups "
                f"{', '.join(self.channel_names)}")

    def _push(self, sample: np.ndarray, now: int, inbound: Inbound) -> None:
        """One group excitation per group, all in one ring push (or none: ring full, counted)."""
        r = self.records
        r["receive_ns"], r["seq"] = now, self.seq
        r["values"][:, 0] = sample
        self._send(inbound)
