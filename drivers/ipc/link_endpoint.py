"""What a link driver (:mod:`drivers.ipc.link`) and its link process (:mod:`drivers.ipc.link_process`) share: the
inbound record and its aux words, the outbound record, the inbound writer and the transport side
(:class:`LinkEndpoint`) that runs in the link process."""
from __future__ import annotations

import threading
from abc import ABC, abstractmethod

import numpy as np

from drivers.core.contract import KIND_CHANNEL, KIND_EXCITATION, KIND_HEARTBEAT, REJECT_REASONS
from drivers.ipc.shm_ring import ShmRing

#: One command (or rejection) from a transport, as the link hands it to the loop.
LINK_RECORD = np.dtype([
    ("receive_ns", "<i8"),    # CLOCK_MONOTONIC when the frame was read (link process)
    ("seq", "<i4"),           # transport sequence number (CAN counter, ScienceMode COUNTER), -1: none
    ("kind", "u1"),           # KIND_CHANNEL / KIND_EXCITATION / KIND_HEARTBEAT (rejects are counted in aux)
    ("pad", "u1"),             # keeps index 2-byte aligned
    ("index", "<i2"),         # channel (0-based, the loop's channel list) or muscle element
    ("values", "<f8", (4,)),  # channel: pw us, amp mA, freq Hz, mode; excitation: u
])

AUX_CONNECTED, AUX_FRAMES_IN, AUX_FRAMES_OUT, AUX_SEND_ERRORS, AUX_REJECTS_TOTAL = range(5)
AUX_REJECT_BASE = 8                  # aux[AUX_REJECT_BASE + r]: frames rejected for REJECT_REASONS[r]
INBOUND_AUX_WORDS = AUX_REJECT_BASE + len(REJECT_REASONS)
INBOUND_CAPACITY = 8192
OUTBOUND_CAPACITY = 1024


def feedback_dtype(frame_dtype: np.dtype) -> np.dtype:
    """What the loop hands the link per tick: the sensor frame and the echoed sequence number."""
    return np.dtype([("echo_seq", "<i4"), ("frame", frame_dtype)])


def reject_counts(ring: ShmRing) -> dict[str, int]:
    """The link's reject counts by reason (non-zero ones), read from an inbound ring's aux words."""
    counts = ring.aux[AUX_REJECT_BASE:AUX_REJECT_BASE + len(REJECT_REASONS)]
    return {REJECT_REASONS[r]: int(counts[r]) for r in np.flatnonzero(counts)}


class Inbound:
    """Link-side writer of :data:`LINK_RECORD` s (single producer: call from one thread only)."""

    def __init__(self, ring: ShmRing) -> None:
        if ring.aux.shape[0] < INBOUND_AUX_WORDS:
            raise ValueError(f"an inbound ring needs {INBOUND_AUX_WORDS} aux words (the reject counters)")
        self.ring = ring
        self._rec = np.zeros(1, LINK_RECORD)
        self._reason = {r: i for i, r in enumerate(REJECT_REASONS)}

    def _push(self, receive_ns: int, seq: int, kind: int, index: int,
              v0: float = 0.0, v1: float = 0.0, v2: float = 0.0, v3: float = 0.0) -> None:
        r = self._rec[0]
        r["receive_ns"], r["seq"], r["kind"], r["index"] = receive_ns, seq, kind, index
        r["values"] = (v0, v1, v2, v3)
        self.ring.push(self._rec)

    def channel(self, receive_ns: int, seq: int, channel: int, pulse_width_us: float, amplitude_ma: float,
                frequency_hz: float, mode: int) -> None:
        self._push(receive_ns, seq, KIND_CHANNEL, channel, pulse_width_us, amplitude_ma, frequency_hz, mode)

    def excitation(self, receive_ns: int, seq: int, muscle: int, value: float) -> None:
        self._push(receive_ns, seq, KIND_EXCITATION, muscle, value)

    def group_excitation(self, receive_ns: int, seq: int, group: int, value: float) -> None:
        """One excitation for every element of muscle group ``group`` (index into the driver's
        ``group_names``), recorded as index -1 - group (``drivers.core.contract.KIND_EXCITATION``)."""
        self._push(receive_ns, seq, KIND_EXCITATION, -1 - group, value)

    def heartbeat(self, receive_ns: int, seq: int = -1) -> None:
        self._push(receive_ns, seq, KIND_HEARTBEAT, -1)

    def reject(self, receive_ns: int, reason: str, seq: int = -1) -> None:
        """A frame the transport could not accept; ``reason`` must be one of REJECT_REASONS. Counted, not
        pushed: the per-reason counter first, then the total the loop watches."""
        aux = self.ring.aux
        aux[AUX_REJECT_BASE + self._reason[reason]] += 1
        aux[AUX_REJECTS_TOTAL] += 1

    def set_connected(self, connected: bool) -> None:
        self.ring.aux[AUX_CONNECTED] = 1 if connected else 0

    def count_in(self, n: int = 1) -> None:
        self.ring.aux[AUX_FRAMES_IN] += n


class LinkEndpoint(ABC):
    """The transport side of a link; built and used inside the link process only.

    Subclasses take plain (picklable) keyword arguments in ``__init__`` and must not open anything
    there: :meth:`open` does, and returns the ports to announce (e.g. ``{"stimulator": "/dev/pts/4"}``).
    Receiving is split so that one thread can serve both directions: :meth:`receive` handles what
    arrived (waiting at most ``timeout_s``), :meth:`periodic` does time-driven work (timeouts, resends).
    """

    #: how often periodic() must run at least, s
    poll_interval_s = 0.05
    #: the inbound writer, set by the link loop (None in tests that drive an endpoint directly)
    inbound: Inbound | None = None

    @abstractmethod
    def open(self) -> dict[str, str]:
        """Open the transport; raise with a clear message when it cannot be opened."""

    def fileno(self) -> int | None:
        """A file descriptor that becomes readable when frames arrive (None: no such descriptor)."""
        return None

    @abstractmethod
    def receive(self, inbound: Inbound, timeout_s: float) -> None:
        """Read, decode, validate and push everything that arrived, waiting at most ``timeout_s``."""

    def periodic(self, inbound: Inbound) -> None:
        """Time-driven work (connection timeouts, resends)."""

    def feed_stopped(self) -> None:
        """The loop has stopped feeding this link (a stalled tick): show every stimulation output as zero.
        Called once per stop, in the link process's main thread. Transports that send no stimulation
        (ScienceMode, CAN: the loop alone applies it) have nothing to zero."""

    @abstractmethod
    def send_feedback(self, records: np.ndarray, stats: np.ndarray) -> None:
        """Send these :func:`feedback_dtype` records; count in ``stats`` (the aux words)."""

    def receive_forever(self, inbound: Inbound, stop: threading.Event) -> None:
        """Receive until ``stop`` is set (the receiver thread of transports without a descriptor)."""
        while not stop.is_set():
            self.receive(inbound, self.poll_interval_s)
            self.periodic(inbound)

    def close(self) -> None:
        """Release the transport."""
