"""What a run shows while numba compiles its kernels (sim.jit.progress, hil.service.warmup_progress), with small
stand-in kernels compiled afresh in this process (never cached), so the real tick's cold compile of minutes
is not needed."""
from __future__ import annotations

import io

from numba import njit

from sim.jit.progress import CompileProgress, StageLines, reachable_kernels


@njit
def _leaf(x):
    return x + 1.0


@njit
def _middle(x):
    return _leaf(x) * 2.0


@njit
def _top(x):
    return _middle(x) + _leaf(x)


@njit
def _elsewhere(x):
    return x - 1.0


@njit
def _second_leaf(x):
    return x * 3.0


@njit
def _second_top(x):
    return _second_leaf(x) + 1.0


@njit
def _third(x):
    return x * 0.5


@njit
def _fourth(x):
    return x * 0.25


class _Status:
    kernels_compiled = kernels_total = 0.0


def test_the_kernels_an_entry_reaches_are_found_from_its_source():
    from hil.rt.plants import compute_tick, compute_tick_mtg
    from hil.service.warmup_progress import tick_kernels

    assert reachable_kernels(_top) == {_top, _middle, _leaf}
    das3, mtg = tick_kernels("das3"), tick_kernels("mtg")
    assert compute_tick in das3 and compute_tick_mtg not in das3 and compute_tick_mtg in mtg
    assert len(das3) > 50 and len(mtg) > 20


def test_each_kernel_compiled_is_counted_once_and_staged_lines_name_it():
    """Three stand-in kernels compiled (nested, the callees first): three reports, one line to start, one
    per stage, one at the end; a kernel outside the set and a second call add nothing."""
    reports, log = [], io.StringIO()
    lines = StageLines(log)

    def report(compiled, total, name):
        reports.append((compiled, total, name.rsplit(".", 1)[-1]))
        lines(compiled, total, name)

    with CompileProgress(lambda: reachable_kernels(_top), report) as progress:
        assert _top(1.0) == 6.0 and _elsewhere(1.0) == 0.0 and _top(2.0) == 9.0
    lines.finish(progress.compiled)
    assert reports == [(1, 3, "_leaf"), (2, 3, "_middle"), (3, 3, "_top")]
    text = log.getvalue().splitlines()
    assert len(text) == 5 and "about 3" in text[0] and text[-1].startswith("hil: the numba kernels are ready: 3")
    assert "compiled 1/3" in text[1] and "_leaf" in text[1] and "compiled 3/3" in text[3] and "_top" in text[3]


def test_a_run_counts_into_its_status_and_writes_lines_only_when_not_a_terminal(monkeypatch):
    import hil.service.warmup_progress as warmup

    monkeypatch.setattr(warmup, "tick_kernels", lambda plant_type: reachable_kernels(_second_top))
    status, log = _Status(), io.StringIO()
    with warmup.reporting_compilation("das3", status, log):
        _second_top(1.0)
    assert (status.kernels_compiled, status.kernels_total) == (2, 2)
    assert "compiled 2/2" in log.getvalue() and "ready" in log.getvalue()

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr(warmup, "tick_kernels", lambda plant_type: {_third})
    terminal, status = Terminal(), _Status()
    with warmup.reporting_compilation("das3", status, terminal):
        _third(1.0)                            # the progress bar shows it: no lines
    assert terminal.getvalue() == "" and (status.kernels_compiled, status.kernels_total) == (1, 1)
    monkeypatch.setattr(warmup, "tick_kernels", lambda plant_type: {_fourth})
    with warmup.reporting_compilation("das3", stream=terminal, bar_on_terminal=False):
        _fourth(1.0)                           # hil run --offline: no bar, so lines on a terminal too
    assert "compiled 1/1" in terminal.getvalue()
