"""What a run shows while numba compiles its kernels before the loop (the first run after an install or an
update): counts in the run's status block for the progress bar of ``hil run`` on a terminal, and a few lines
on stderr otherwise (a log, a pipe, the journal)."""
from __future__ import annotations

import sys
from contextlib import contextmanager

from hil.rt import plants
from sim.jit.progress import CompileProgress, StageLines, reachable_kernels


def tick_kernels(plant_type: str) -> set:
    """The kernels the compiled tick of ``[plant] type`` may compile (:mod:`hil.rt.plants`)."""
    return reachable_kernels(plants.plant_type(plant_type).tick)


@contextmanager
def reporting_compilation(plant_type: str, status=None, stream=None, bar_on_terminal: bool = True):
    """Count the kernels compiled inside the block into ``status`` (``kernels_compiled``, ``kernels_total``;
    for the progress bar of ``hil run``), with :class:`sim.jit.progress.StageLines` on ``stream``
    (stderr) unless it is a terminal that shows the bar."""
    stream = sys.stderr if stream is None else stream
    lines = None if bar_on_terminal and stream.isatty() else StageLines(stream)

    def report(compiled: int, total: int, name: str) -> None:
        if status is not None:
            status.kernels_total, status.kernels_compiled = total, compiled
        if lines is not None:
            lines(compiled, total, name)

    with CompileProgress(lambda: tick_kernels(plant_type), report) as progress:
        yield progress
    if lines is not None:
        lines.finish(progress.compiled)
