"""Progress of numba's compilation of the plant's kernels before a loop starts.

The first run after an install or an update compiles every kernel (minutes on a small machine); later runs
load them from numba's cache in seconds. numba announces each compilation as a ``numba:compile`` event
(nested: a caller's compilation contains its callees'); a cache load announces nothing. :class:`CompileProgress`
counts the compilations of a known set of kernels, :func:`reachable_kernels` finds that set from an entry
point, and :class:`StageLines` turns the counts into a few lines for a log (stderr that is not a terminal).
"""
from __future__ import annotations

import time
import types
from typing import Callable, Iterable, TextIO

from numba.core import event
from numba.core.registry import CPUDispatcher

Report = Callable[[int, int, str], None]
"""``report(compiled, total, name)``: after each kernel of the set is compiled."""


def kernel_name(dispatcher) -> str:
    func = dispatcher.py_func
    return f"{func.__module__}.{func.__qualname__}"


def _code_objects(code: types.CodeType):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


def _called(dispatcher) -> Iterable:
    """The compiled functions the source of ``dispatcher`` names: globals, attributes of imported modules,
    closure cells."""
    func = dispatcher.py_func
    for code in _code_objects(func.__code__):
        for name in code.co_names:
            found = func.__globals__.get(name)
            if isinstance(found, types.ModuleType):
                yield from (getattr(found, attr, None) for attr in code.co_names)
            else:
                yield found
    for cell in func.__closure__ or ():
        try:
            yield cell.cell_contents
        except ValueError:                  # an empty cell
            pass


def reachable_kernels(*entries) -> set:
    """The compiled functions ``entries`` call, directly or through others, found from the names their
    source uses: an upper estimate (a function named but not called counts; one passed in as an
    argument does not)."""
    found, todo = set(), list(entries)
    while todo:
        dispatcher = todo.pop()
        if dispatcher in found:
            continue
        found.add(dispatcher)
        todo.extend(d for d in _called(dispatcher) if isinstance(d, CPUDispatcher) and d not in found)
    return found


class CompileProgress(event.Listener):
    """While entered, counts the kernels of ``find_kernels()`` that numba compiles (each once, whatever its
    signatures) and calls ``report`` after each; a kernel loaded from the cache is not counted. The set is
    found at the first compilation, so a start from the cache does not pay for the search."""

    def __init__(self, find_kernels: Callable[[], Iterable], report: Report) -> None:
        self.find_kernels, self.report = find_kernels, report
        self.pending, self.total, self.compiled = None, 0, 0

    def on_start(self, ev) -> None:
        if self.pending is None:
            self.pending = set(self.find_kernels())
            self.total = len(self.pending)

    def on_end(self, ev) -> None:
        dispatcher = ev.data["dispatcher"]
        if dispatcher in self.pending:
            self.pending.discard(dispatcher)
            self.compiled += 1
            self.report(self.compiled, self.total, kernel_name(dispatcher))

    def __enter__(self) -> "CompileProgress":
        event.register("numba:compile", self)
        return self

    def __exit__(self, *exc) -> None:
        event.unregister("numba:compile", self)


class StageLines:
    """A report that writes one line to ``stream`` when compiling starts, one as each tenth of the kernels
    is done (the latest kernel named) and, from :meth:`finish`, one when all are ready."""

    def __init__(self, stream: TextIO, prefix: str = "hil: ", stages: int = 10) -> None:
        self.stream, self.prefix, self.stages = stream, prefix, stages
        self.stage, self.started = 0, None

    def _line(self, text: str) -> None:
        print(self.prefix + text, file=self.stream, flush=True)

    def __call__(self, compiled: int, total: int, name: str) -> None:
        if self.started is None:
            self.started = time.monotonic()
            self._line(f"compiling the plant's numba kernels, about {total} (the first run after an install or an "
                       "update takes minutes; later runs load them from the cache)")
        stage = compiled * self.stages // max(total, 1)
        if stage > self.stage:
            self.stage = stage
            self._line(f"compiled {compiled}/{total} kernels after {time.monotonic() - self.started:.0f} s "
                       f"(latest: {name})")

    def finish(self, compiled: int) -> None:
        """After the warm-up: a closing line if anything was compiled."""
        if self.started is not None:
            self._line(f"the numba kernels are ready: {compiled} compiled in "
                       f"{time.monotonic() - self.started:.0f} s, cached for the next runs")
