"""``hil bench analysis`` (hil.bench.analysis): one static-optimisation posture and a one-angle sweep run and
print their tables; bad options are refused with one line. Nothing here is timed."""
from __future__ import annotations

import pytest
from typer.testing import CliRunner

from hil.bench import analysis as analysis_bench
from hil.bench.analysis import default_angles_deg
from hil.cli import app
from sim.analysis.max_moment import TASKS


@pytest.mark.slow
def test_one_posture_and_one_angle_print_their_tables(monkeypatch):
    monkeypatch.setattr(analysis_bench, "default_workers", lambda: 1)     # no worker processes under xdist
    res = CliRunner().invoke(app, ["bench", "analysis", "--tasks", "internal-rotation", "--angles-every", "100",
                                   "--criteria", "b", "--elevations", "60"])
    assert res.exit_code == 0, res.output
    out = res.output
    assert "Static optimisation" in out and "passed" in out
    assert "Maximum-moment sweeps" in out and "1 worker(s)" in out and "internal-rotation" in out
    assert "CPU:" in out and "steal over the run" in out


def test_angles_every_thins_the_default_sweep():
    np_angles = default_angles_deg(TASKS["elbow-flexion"], 2)
    assert list(np_angles) == [15, 45, 75, 105, 135]
    assert list(default_angles_deg(TASKS["abduction"])) == list(range(10, 100, 10))


@pytest.mark.parametrize("args, message", [(["--tasks", "flexion"], "--tasks"), (["--angles-every", "0"], "--angles-every"),
                                           (["--criteria", "x"], "--criteria"), (["--elevations", "ab"], "--elevations")])
def test_bad_options_exit_2_with_one_line(args, message):
    res = CliRunner().invoke(app, ["bench", "analysis", *args])
    assert res.exit_code == 2 and message in res.output and "Traceback" not in res.output


def test_cpu_time_counts_this_process():
    before = analysis_bench.cpu_time_s()
    sum(i * i for i in range(200_000))
    assert analysis_bench.cpu_time_s() > before
