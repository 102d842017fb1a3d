"""Connection slots for the threaded HTTP servers of the metrics exporter and the live view.

At most a fixed number of connections have a thread at once. A newcomer beyond that takes the slot of the
oldest connection still sending its request (a slow or idle client, shut down at once), and is refused only
when every slot is busy answering a request: clients that open connections and never finish a request can
keep out neither a scrape nor a page, and the threads stay bounded.
"""
from __future__ import annotations

import socket
import threading


class ConnectionSlots:
    """Mixin placed before ``socketserver.ThreadingMixIn`` in a server's bases. The server calls
    :meth:`init_slots` in its ``__init__`` and :meth:`request_read` when a connection's request has arrived,
    and may override :meth:`refuse` (say why before closing)."""

    EVICTED_SLOT_WAIT_S = 1.0
    """How long a newcomer waits for the thread of the connection it evicted to free its slot."""

    def init_slots(self, max_connections: int) -> None:
        self.slots = threading.BoundedSemaphore(max_connections)
        self.slots_lock = threading.Lock()      # guards the fields below (and a server's own counters)
        self.reading: dict = {}                 # connections with a thread still sending their request, oldest first
        self.open_connections = 0               # connections with a thread
        self.evicted = 0                        # connections cut to make room for a newcomer

    def process_request(self, request, client_address) -> None:
        """A thread for the connection in a free slot, or in the slot of the oldest connection still sending its
        request; else :meth:`refuse`."""
        if not (self.slots.acquire(blocking=False) or self._evict_oldest_reading()):
            self.refuse(request)
            return
        with self.slots_lock:
            self.reading[request] = None
            self.open_connections += 1
        try:
            super().process_request(request, client_address)
        except RuntimeError:                    # no thread could be started
            self._release(request)
            self.refuse(request)

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._release(request)

    def request_read(self, request) -> bool:
        """The connection's request has arrived, so it is no longer evicted for a newcomer; False if it was
        evicted meanwhile (its socket is shut down: answer nothing)."""
        with self.slots_lock:
            return self.reading.pop(request, False) is None

    def refuse(self, request) -> None:
        """No slot for ``request``: close it."""
        self.shutdown_request(request)

    def _evict_oldest_reading(self) -> bool:
        """Cut the oldest connection still sending its request and take the slot its thread frees."""
        with self.slots_lock:
            oldest = next(iter(self.reading), None)
            if oldest is None:
                return False
            del self.reading[oldest]
            self.evicted += 1
        try:
            oldest.shutdown(socket.SHUT_RDWR)   # wakes its thread, which then frees the slot
        except OSError:
            pass
        return self.slots.acquire(timeout=self.EVICTED_SLOT_WAIT_S)

    def _release(self, request) -> None:
        with self.slots_lock:
            self.reading.pop(request, None)
            self.open_connections -= 1
        self.slots.release()
