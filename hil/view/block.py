"""The live view's status block: a few hundred bytes of shared memory the real-time process writes and the
view server reads, guarded by a sequence lock.

Seqlock: the writer makes ``seq`` odd, writes the fields, makes it even again; a reader reads ``seq``,
copies the block, reads ``seq`` again and keeps the copy only if both reads are equal and even (else it
retries). One writer only. On x86-64 (total store order) the stores and loads stay in program order, and
each store is a separate call the C compiler cannot move other stores across, so no fence is needed (the
same argument as :mod:`drivers.ipc.shm_ring`).

The writer (:class:`ViewWriter`, a tick listener) reads two fields of the tick record every tick (lateness,
overrun) and writes the block every ``ceil(VIEW_INTERVAL_S / period)`` ticks with one gather of the tick
record's bytes (``np.take`` over a precomputed byte index) and eight-byte loads and stores through ctypes
(the sequence, its own counters, the run's safety counters): O(1), no allocation of buffers, no logging,
no unit conversion (the reader converts). A loop that sleeps between ticks runs each numpy call with cold
caches, several microseconds each, so a write makes one. The supervisor
creates the block only when the view is on.
"""
from __future__ import annotations

import ctypes
import math
from multiprocessing import shared_memory

import numpy as np

from drivers.ipc.shm_ring import close_shared_memory
from hil.rt.stimulation import MAX_CHANNELS
from sim.das3.model import N_DOF

#: The writer writes at most this often (s): about 100 Hz, more than the page draws.
VIEW_INTERVAL_S = 0.01

#: Fields copied from the tick record in one gather: block field -> (record field, frame field or None).
GATHERED = {"tick": ("tick", None), "time_s": ("frame", "time"), "lateness_ns": ("lateness_ns", None),
            "compute_ns": ("compute_ns", None), "gh_stability": ("frame", "gh_stability"), "q": ("frame", "q"),
            "th_angles": ("frame", "th_angles"), "gh_force": ("frame", "gh_force"), "status": ("frame", "status"),
            "status_again": ("frame", "status")}

BLOCK_DTYPE = np.dtype([
    ("seq", "<u8"),                 # odd while the writer writes
    ("n_channels", "<i8"),
    ("max_lateness_ns", "<f8"),     # the writer's own counters, stored at once: the largest lateness since
    ("deadline_misses", "<f8"),     # the previous write, ticks that overran so far, and the engine's
    ("watchdog_trips", "<f8"),      # safety counters so far
    ("gh_unstable_ticks", "<f8"),
    ("rom_alarm_ticks", "<f8"),
    ("tick", "<i8"),                # from here on: gathered from the tick record (GATHERED)
    ("time_s", "<f8"),              # simulated time at the end of the tick
    ("lateness_ns", "<i8"),         # of the written tick: start - deadline
    ("compute_ns", "<i8"),          # engine step of the written tick
    ("gh_stability", "<f8"),
    ("q", "<f8", (N_DOF,)),         # rad
    ("th_angles", "<f8", (3,)),     # rad
    ("gh_force", "<f8", (3,)),      # N, scapula frame
    ("status", "<u4"),              # the frame's status bits (drivers.core.contract.STATUS_BITS)
    ("status_again", "<u4"),        # the same bits again: keeps the gathered bytes one contiguous span
    ("applied", "<f8", (MAX_CHANNELS, 3)),  # pulse width us, amplitude mA, frequency Hz, after safety
])
"""The block's one record (the tick record's own units)."""

_EXTRAS = ("max_lateness_ns", "deadline_misses", "watchdog_trips", "gh_unstable_ticks", "rom_alarm_ticks")


def _offset(dtype: np.dtype, field: str, sub: str | None = None) -> int:
    off = dtype.fields[field][1]
    return off if sub is None else off + dtype.fields[field][0].fields[sub][1]


def gather_index(record_dtype: np.dtype, n_channels: int) -> np.ndarray:
    """Byte index into a tick record whose values, in order, are the block's gathered span (``tick`` up to
    ``applied`` of the first ``n_channels`` channels)."""
    parts = []
    for name, (field, sub) in GATHERED.items():
        start = _offset(record_dtype, field, sub)
        parts.append(np.arange(start, start + BLOCK_DTYPE.fields[name][0].itemsize))
    applied = _offset(record_dtype, "applied")
    for c in range(n_channels):                 # pw, amp, freq of each channel; not the pulse mode
        parts.append(np.arange(applied + 32 * c, applied + 32 * c + 24))
    return np.concatenate(parts).astype(np.intp)


class ViewBlock:
    """One :data:`BLOCK_DTYPE` record in shared memory: created by the supervisor, attached by the others."""

    def __init__(self, shm: shared_memory.SharedMemory, owner: bool) -> None:
        self.shm, self.owner = shm, owner
        self.record = np.ndarray((1,), BLOCK_DTYPE, buffer=shm.buf)
        self.seq = ctypes.c_uint64.from_buffer(shm.buf)     # an aligned 8-byte load or store, no numpy call

    @classmethod
    def create(cls) -> "ViewBlock":
        block = cls(shared_memory.SharedMemory(create=True, size=BLOCK_DTYPE.itemsize), True)
        block.record[:] = np.zeros(1, BLOCK_DTYPE)
        return block

    @classmethod
    def attach(cls, name: str) -> "ViewBlock":
        return cls(shared_memory.SharedMemory(name=name), False)

    @property
    def name(self) -> str:
        return self.shm.name

    def read(self, out: np.ndarray | None = None, tries: int = 1000) -> np.ndarray | None:
        """A consistent copy of the record (shape (1,)), or None while nothing was written yet or when no
        try saw the writer outside a write."""
        out = np.zeros(1, BLOCK_DTYPE) if out is None else out
        for _ in range(tries):
            before = self.seq.value
            if before & 1:
                continue
            out[:] = self.record
            if self.seq.value == before:
                return out if before else None
        return None

    def release(self) -> None:
        del self.record, self.seq                            # no view of the mapping may outlive it
        close_shared_memory(self.shm, self.owner)


class ViewWriter:
    """Tick listener (:class:`hil.rt.tick.TickListener`) that keeps the block current: every tick it notes the
    lateness and whether the tick overran; every ``every`` ticks it copies the frame's q, thoracohumeral
    angles, GH force and stability, status bits, each channel's applied pulse, and the safety counters."""

    def __init__(self, block: ViewBlock, period_s: float) -> None:
        self.block = block
        self.every = max(1, math.ceil(VIEW_INTERVAL_S / period_s - 1e-9))
        self.countdown = 1          # the first tick is written
        self.misses = 0
        self.max_late = 0
        self.source = None          # the tick record the views below look into

    def _bind(self, record: np.ndarray, engine) -> None:
        """Views into the (persistent) tick record, the run's counters and the block, made once: a write is
        then one gather and a few 8-byte loads and stores."""
        n = min(engine.n_channels, MAX_CHANNELS)
        idx = gather_index(record.dtype, n)
        start = BLOCK_DTYPE.fields["tick"][1]
        self.source, self.src, self.idx = record, record.view(np.uint8), idx
        self.dst = self.block.record.view(np.uint8)[start:start + len(idx)]
        buf = self.block.shm.buf
        self.out = [ctypes.c_double.from_buffer(buf, BLOCK_DTYPE.fields[name][1]) for name in _EXTRAS]
        c = engine.counters
        self.counts = [ctypes.c_double.from_buffer(cell.a, 8 * cell.i)
                       for cell in (c.watchdog_trips, c.gh_unstable_ticks, c.rom_alarm_ticks)]
        self.late = ctypes.c_int64.from_buffer(record, record.dtype.fields["lateness_ns"][1])
        self.skipped = ctypes.c_int64.from_buffer(record, record.dtype.fields["skipped_deadlines"][1])
        self.block.record["n_channels"] = n

    def close(self) -> None:
        """Drop the views into the block and the counters (before they are released)."""
        self.source = self.src = self.dst = self.out = self.counts = None

    def on_tick(self, record: np.ndarray, engine, actuation_ns: int) -> None:
        if record is not self.source:
            self._bind(record, engine)
        late = self.late.value
        if late > self.max_late:
            self.max_late = late
        if self.skipped.value:
            self.misses += 1
        self.countdown -= 1
        if not self.countdown:
            self.countdown = self.every
            self._write(engine)

    def _write(self, engine) -> None:
        seq, (late, misses, trips, gh, rom), (c_trips, c_gh, c_rom) = self.block.seq, self.out, self.counts
        seq.value += 1                               # odd: readers retry
        np.take(self.src, self.idx, out=self.dst, mode="wrap")
        late.value, misses.value = self.max_late, self.misses
        trips.value, gh.value, rom.value = c_trips.value, c_gh.value, c_rom.value
        seq.value += 1                               # even: consistent
        self.max_late = 0
