"""Single-producer/single-consumer ring of fixed-size records in shared memory.

The real-time process (producer) copies each record into the ring without blocking or allocating data
buffers; a helper process (consumer: the recorder) drains it. Layout of the shared block:

    offset 0   uint64 head     records committed by the producer (monotonic)
    offset 8   uint64 tail     records consumed by the consumer (monotonic)
    offset 16  uint64 dropped  records the producer discarded because the ring was full
    offset 24  uint64 closed   1 when the producer has finished
    offset 32  uint64 aux[n]   free words for the two sides' own use (each word written by one side only;
                               n = ``aux_words``, 4 by default)
    offset H   capacity * itemsize bytes of records, record i at slot i % capacity (H: the header rounded
               up to 64 bytes)

Memory ordering: the producer writes the record bytes, then stores the new head; the consumer reads
head, then the records below it, then stores tail. Each side writes only its own counter. On x86-64
(total store order) and with aligned 8-byte counters this is safe without locks; other architectures
would need explicit fences. Exactly one producer and one consumer per ring.
"""
from __future__ import annotations

from multiprocessing import shared_memory

import numpy as np

_HEAD, _TAIL, _DROPPED, _CLOSED = range(4)
_CONTROL_WORDS = 4


def header_bytes(aux_words: int) -> int:
    """Control and aux words, rounded up to a 64-byte cache line."""
    return -(-(_CONTROL_WORDS + aux_words) * 8 // 64) * 64


class ShmRing:
    def __init__(self, shm: shared_memory.SharedMemory, dtype: np.dtype, capacity: int, owner: bool,
                 aux_words: int = 4) -> None:
        self.shm = shm
        self.dtype = np.dtype(dtype)
        self.capacity = capacity
        self.owner = owner
        header = header_bytes(aux_words)
        self._ctl = np.ndarray((_CONTROL_WORDS + aux_words,), dtype=np.uint64, buffer=shm.buf, offset=0)
        self.aux = self._ctl[_CONTROL_WORDS:]
        self._records = np.ndarray((capacity,), dtype=self.dtype, buffer=shm.buf, offset=header)

    @classmethod
    def create(cls, dtype, capacity: int, aux_words: int = 4) -> "ShmRing":
        dtype = np.dtype(dtype)
        shm = shared_memory.SharedMemory(create=True, size=header_bytes(aux_words) + capacity * dtype.itemsize)
        ring = cls(shm, dtype, capacity, owner=True, aux_words=aux_words)
        ring._ctl[:] = 0
        return ring

    @classmethod
    def attach(cls, name: str, dtype, capacity: int, aux_words: int = 4) -> "ShmRing":
        shm = shared_memory.SharedMemory(name=name)
        # attachers are spawned children of the creator and share its resource tracker: the creator
        # unlinks the block (and unregisters it) in release()
        return cls(shm, dtype, capacity, owner=False, aux_words=aux_words)

    @property
    def name(self) -> str:
        return self.shm.name

    # -- producer ------------------------------------------------------------------------------
    def push(self, record: np.ndarray) -> bool:
        """Copy one record (a 1-element array of the ring's dtype); False (and counted) if full."""
        head = int(self._ctl[_HEAD])
        if head - int(self._ctl[_TAIL]) >= self.capacity:
            self._ctl[_DROPPED] += 1
            return False
        self._records[head % self.capacity] = record[0]
        self._ctl[_HEAD] = head + 1
        return True

    def push_many(self, records: np.ndarray, n: int) -> int:
        """Copy the first ``n`` records in at most two slice copies; returns how many fit (the rest are
        counted as dropped)."""
        head = int(self._ctl[_HEAD])
        fit = min(n, self.capacity - (head - int(self._ctl[_TAIL])))
        if fit < n:
            self._ctl[_DROPPED] += n - fit
        if fit <= 0:
            return 0
        start = head % self.capacity
        first = min(fit, self.capacity - start)
        self._records[start:start + first] = records[:first]
        if fit > first:
            self._records[: fit - first] = records[first:fit]
        self._ctl[_HEAD] = head + fit
        return fit

    def close(self) -> None:
        """Producer: no more records."""
        self._ctl[_CLOSED] = 1

    # -- consumer ------------------------------------------------------------------------------
    def pop_available(self) -> np.ndarray:
        """A copy of every committed, unconsumed record, in order (allocates: not for the tick)."""
        out = np.empty(max(self.pending, 0), self.dtype)
        return out[:self.pop_into(out)]

    def pop_into(self, out: np.ndarray) -> int:
        """Copy up to ``len(out)`` committed records into ``out`` (no allocation); returns how many."""
        head, tail = int(self._ctl[_HEAD]), int(self._ctl[_TAIL])
        n = min(head - tail, out.shape[0])
        if n <= 0:
            return 0
        start = tail % self.capacity
        first = min(n, self.capacity - start)
        out[:first] = self._records[start:start + first]
        if n > first:
            out[first:n] = self._records[: n - first]
        self._ctl[_TAIL] = tail + n
        return n

    @property
    def closed(self) -> bool:
        return bool(self._ctl[_CLOSED])

    @property
    def dropped(self) -> int:
        return int(self._ctl[_DROPPED])

    @property
    def offered(self) -> int:
        """Records the producer tried to push: committed plus dropped."""
        return int(self._ctl[_HEAD]) + int(self._ctl[_DROPPED])

    @property
    def pending(self) -> int:
        return int(self._ctl[_HEAD]) - int(self._ctl[_TAIL])

    def release(self) -> None:
        """Close this process's mapping (and unlink the block if this side created it)."""
        del self._ctl, self._records, self.aux
        close_shared_memory(self.shm, self.owner)


def close_shared_memory(shm: shared_memory.SharedMemory, owner: bool) -> None:
    """Close this process's mapping; the creating side also unlinks the block (once)."""
    shm.close()
    if owner:
        try:
            shm.unlink()
        except FileNotFoundError:
            pass
        except (BrokenPipeError, ConnectionError):   # unlinked; only the resource tracker was gone
            pass
