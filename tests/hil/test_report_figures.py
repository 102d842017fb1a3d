"""What a reader looks for in the figures of ``hil report`` (hil.reports.run_report) and in the static-optimisation
figure (hil.reports.analysis_output), checked on the figures' own artists: the stimulation panels and the
controller's target beside the joint angles, the GH-unstable ticks and the time colour map of the glenoid, the
deadline and p99 on the lateness histogram, the static-opt legend clear of the glenoid, and the passive loads
(contact depth, conoid elongation) against the analysis limits."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from drivers.core.contract import STATUS_GH_UNSTABLE
from hil.config import service_config_from_dict
from hil.recording.hilrec import read_run_recording
from hil.reports import run_report
from hil.reports.analysis_output import solution_figure
from hil.reports.passive_loads_figure import DEPTH_TOLERANCE_E, passive_loads_figure, passive_loads_summary
from hil.reports.run_metrics import config_target
from sim.analysis.passive_limits import PassiveLoadHistory, passive_load_history

RECORDING = Path(__file__).resolve().parents[1] / "data" / "elbow-hold-v0.4.hilrec"
"""An elbow-hold run: PID on the biceps and triceps channels towards target_deg = 90 in its recorded config."""


@pytest.fixture(scope="module")
def plt():
    return run_report.pyplot_agg()


@pytest.fixture(scope="module")
def recorded():
    reader = read_run_recording(str(RECORDING))
    return reader.header, reader.read("ticks")


def test_joint_angles_show_each_channels_stimulation_and_the_controllers_target(plt, recorded):
    h, ticks = recorded
    cfg = service_config_from_dict(h["config"], h["config_path"])
    target = config_target(cfg, h["dof_names"])
    fig = run_report.joint_angles_figure(plt, ticks["frame"]["time"], ticks, h["dof_names"], h["channel_names"],
                                         target, "run")
    angles, stim = fig.axes[:3], fig.axes[3:]
    assert [ax.get_ylabel() for ax in stim] == ["amplitude (mA)", "pulse width (us)", "frequency (Hz)"]
    on = run_report.stimulated_channels(ticks["applied"])
    assert [h["channel_names"][c] for c in on] == ["biceps", "triceps"]
    for ax, (_, k) in zip(stim, run_report.STIMULATION_PANELS):
        assert [line.get_label() for line in ax.lines] == ["biceps", "triceps"]      # one line per channel
        for line, c in zip(ax.lines, on):
            np.testing.assert_array_equal(line.get_ydata(), ticks["applied"][:, c, k])
    marked = [line for ax in angles for line in ax.lines if line.get_label().startswith("target")]
    assert len(marked) == 1 and marked[0] in angles[2].lines                       # on the elbow's panel
    assert np.allclose(marked[0].get_ydata(), 90.0)                                 # deg, from the recorded config
    plt.close(fig)


def test_a_run_without_stimulation_or_target_says_so(plt, recorded):
    h, ticks = recorded
    quiet = ticks.copy()
    quiet["applied"] = 0.0
    fig = run_report.joint_angles_figure(plt, quiet["frame"]["time"], quiet, h["dof_names"], h["channel_names"],
                                         None, "run")
    assert all(not ax.lines for ax in fig.axes[3:])
    assert [t.get_text() for t in fig.axes[3].texts] == ["no channel stimulated"]
    assert not any(line.get_label().startswith("target") for ax in fig.axes for line in ax.lines)
    plt.close(fig)


def _still_then_moving(frame: np.ndarray) -> np.ndarray:
    """The recorded frames with the arm still (qdot 0) in the first and last quarter of the run."""
    frame = frame.copy()
    n = len(frame)
    frame["qdot"][: n // 4] = 0.0
    frame["qdot"][3 * n // 4:] = 0.0
    return frame


def test_glenoid_marks_unstable_ticks_and_colours_only_the_moving_part(plt, recorded, model):
    _, ticks = recorded
    frame = _still_then_moving(ticks["frame"])
    unstable = np.zeros(len(frame), bool)
    unstable[[5, 17, 30]] = True
    frame["status"][unstable] |= STATUS_GH_UNSTABLE
    t = frame["time"]
    fig = run_report.glenoid_figure(plt, t, frame, model)
    ax = fig.axes[0]
    crosses = [line for line in ax.lines if line.get_label().startswith("GH unstable")]
    assert len(crosses) == 1 and crosses[0].get_label() == "GH unstable (3 ticks)"
    theta, phi = np.degrees(run_report.glenoid_angles(frame["gh_force"], model.arrays.glenoid))
    np.testing.assert_allclose(crosses[0].get_xdata(), phi[unstable])
    np.testing.assert_allclose(crosses[0].get_ydata(), theta[unstable])
    n = len(frame)
    coloured = [c for c in ax.collections if c.get_array() is not None]
    assert len(coloured) == 1
    assert coloured[0].norm.vmin == pytest.approx(t[n // 4]) and coloured[0].norm.vmax == pytest.approx(t[3 * n // 4 - 1])
    assert len(coloured[0].get_offsets()) == 3 * n // 4 - n // 4        # the still ticks are drawn grey
    plt.close(fig)


def test_a_still_arm_spans_the_whole_run():
    t = np.arange(10) * 0.004
    assert run_report.moving_span(t, np.zeros((10, 11))) == (t[0], t[-1])


def test_lateness_histogram_marks_the_deadline_and_p99(plt):
    lat_us = np.r_[np.full(990, 2.0), np.full(10, 300.0)]
    fig = run_report.lateness_figure(plt, lat_us, 0.004)
    ax = fig.axes[0]
    lines = {line.get_label().split(":")[0].split(" ")[0]: line for line in ax.lines}
    assert lines["deadline"].get_xdata()[0] == pytest.approx(4000.0)                   # us: one period
    assert lines["p99"].get_xdata()[0] == pytest.approx(np.percentile(lat_us, 99))
    assert ax.get_xlim()[1] > 4000.0                                                   # the deadline is in view
    plt.close(fig)


def test_static_opt_legend_leaves_the_glenoid_clear(plt, model):
    n = len(model.muscle_names)
    sol = SimpleNamespace(activation=np.linspace(0, 1, n), force=np.linspace(0, 100, n), criterion="c",
                          th_angles=np.radians([30, 45, 0]), gh_angles=np.radians([-20.0, 15.0]), gh_stability=-0.4)
    fig = solution_figure(plt, sol, model)
    fig.canvas.draw()
    gx = fig.axes[1]
    legend = gx.get_legend().get_window_extent()
    assert not legend.overlaps(gx.get_window_extent())                # nothing drawn in the glenoid is covered
    marker = gx.transData.transform((15.0, -20.0))
    assert gx.get_window_extent().contains(*marker)
    plt.close(fig)


def test_passive_loads_count_only_ticks_beyond_the_analysis_limits(plt):
    rest = -0.02
    e = np.array([[rest, -0.01], [rest - 0.5 * DEPTH_TOLERANCE_E, -0.01], [-0.01, rest - 0.003], [-0.03, -0.04]])
    history = PassiveLoadHistory(e, np.array([0.0, 7.8e-3, 7.9e-3, 9e-3]), rest, 7.7e-3)
    summary = passive_loads_summary(history)
    assert summary["ticks_deeper_than_rest"] == 2            # the last two; the second is within the tolerance
    assert summary["ticks_conoid_beyond_failure"] == 3
    assert summary["contact_e_min"] == {"TS": -0.03, "AI": -0.04}
    assert summary["conoid_elongation_max_mm"] == pytest.approx(9.0)
    frame = np.zeros(4, [("st_contact_force", float, (2, 3))])
    frame["st_contact_force"][:, 0, 2] = [1.0, 2.0, 3.0, 4.0]
    fig = passive_loads_figure(plt, np.arange(4) * 0.004, frame, history)
    depth, force, conoid = fig.axes
    limit = [line for line in depth.lines if line.get_label().startswith("rest depth")]
    assert len(limit) == 1 and np.allclose(limit[0].get_ydata(), rest)
    np.testing.assert_allclose(force.lines[0].get_ydata(), [1.0, 2.0, 3.0, 4.0])
    np.testing.assert_allclose(conoid.lines[0].get_ydata(), [0.0, 7.8, 7.9, 9.0])
    plt.close(fig)


def test_report_of_a_das3_run_gives_its_passive_loads(tmp_path, model):
    summary = run_report.make_report(str(RECORDING), str(tmp_path))
    ticks = read_run_recording(str(RECORDING)).read("ticks")
    history = passive_load_history(model, ticks["frame"]["q"])
    assert summary["passive_loads"] == passive_loads_summary(history)
    assert summary["passive_loads"]["contact_e_min"]["TS"] == pytest.approx(history.contact_e[:, 0].min())
    assert Path(summary["files"]["passive_loads"]).stat().st_size > 10_000
