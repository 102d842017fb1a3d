"""Independent solves of a sweep in a pool of worker processes.

A multi-start sweep (:mod:`sim.analysis.max_moment`) knows most of its solves in advance (the published and
random starts of every angle) and a few only when an earlier one has finished (a continuation start is the
neighbour's best). :class:`SolvePool` runs both kinds on ``workers`` processes: a job handed in as ``urgent``
(on the sequential chain) starts before any queued one, the rest start in the order given, and at most
``workers`` jobs run at once so that an urgent job never waits behind the whole queue. Every job is a
deterministic function of its arguments and the caller reads results by ticket in its own order, so the
answers are the same whatever the number of workers and the order the jobs finish in.

With one worker nothing is started in advance: a job runs in this process when its result is asked for.
"""
from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait

MAX_DEFAULT_WORKERS = 2
"""Default ceiling: a sweep's continuation passes are one sequential chain of solves, so past two workers the
chain, not the core count, sets the time."""

MAX_WORKERS = 64

_WORKER_MODEL = None


def default_workers() -> int:
    """The CPU count, at most :data:`MAX_DEFAULT_WORKERS`."""
    return max(1, min(MAX_DEFAULT_WORKERS, os.cpu_count() or 1))


def _load_worker(model) -> None:
    global _WORKER_MODEL
    _WORKER_MODEL = model


def _run_in_worker(job: Callable, args: tuple):
    return job(_WORKER_MODEL, *args)


class SolvePool:
    """``submit(job, *args)`` -> ticket; ``result(ticket)`` -> ``job(model, *args)``. Jobs are module-level
    functions with picklable arguments that return (not raise) their expected failures."""

    def __init__(self, model, workers: int = 1) -> None:
        if not 1 <= workers <= MAX_WORKERS:
            raise ValueError(f"workers must be in 1..{MAX_WORKERS}")
        self.model, self.workers = model, workers
        self._executor = None
        if workers > 1:
            self._executor = ProcessPoolExecutor(workers, initializer=_load_worker, initargs=(model,))
        self._calls: list[tuple[Callable, tuple]] = []
        self._urgent: deque[int] = deque()
        self._queued: deque[int] = deque()
        self._running: dict[int, Future] = {}
        self._done: dict[int, object] = {}

    def __enter__(self) -> "SolvePool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None

    def submit(self, job: Callable, *args, urgent: bool = False) -> int:
        ticket = len(self._calls)
        self._calls.append((job, args))
        (self._urgent if urgent else self._queued).append(ticket)
        self._fill()
        return ticket

    def result(self, ticket: int):
        """The job's return value (its exception propagates), run here when there is one worker."""
        if self._executor is None:
            if ticket not in self._done:
                job, args = self._calls[ticket]
                self._done[ticket] = job(self.model, *args)
            return self._done[ticket]
        while ticket not in self._done:
            if ticket in self._queued:            # needed now: first in line
                self._queued.remove(ticket)
                self._urgent.appendleft(ticket)
            self._fill()
            if not self._running:
                raise RuntimeError(f"job {ticket} is neither done nor running")
            finished, _ = wait(list(self._running.values()), return_when=FIRST_COMPLETED)
            for t, future in list(self._running.items()):
                if future in finished:
                    self._done[t] = future.result()
                    del self._running[t]
        return self._done[ticket]

    def _fill(self) -> None:
        """Start waiting jobs, urgent ones first, until ``workers`` run."""
        if self._executor is None:
            return
        while len(self._running) < self.workers and (self._urgent or self._queued):
            ticket = (self._urgent or self._queued).popleft()
            job, args = self._calls[ticket]
            self._running[ticket] = self._executor.submit(_run_in_worker, job, args)
