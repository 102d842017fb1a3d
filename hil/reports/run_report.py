"""``hil report``: PNG plots and a summary of a recording.

- ``joint_angles.png``: the 11 joint angles (deg) over time, one panel each for the clavicle and
  scapula (SC, AC), the humerus (GH) and the elbow and forearm (EL, PS), with the loopback controller's
  target (its ``target_deg``, from the recorded config) dashed; below them the applied stimulation of each
  stimulated channel: amplitude, pulse width and frequency;
- ``glenoid.png``: the GH joint force direction inside the glenoid ellipse (theta superior-inferior vs
  phi anterior-posterior, deg, rim half-angles from the recorded model config), as in the inset of
  Chadwick et al. 2014 Fig. 3, coloured by time while the arm moves (grey while it is still), GH-unstable
  ticks crossed;
- ``passive_loads.png`` (plants with a shoulder girdle): the scapula's contact depth in the thorax and the
  conoid's elongation against the maximum-moment analysis's limits (:mod:`hil.reports.passive_loads_figure`);
- ``lateness.png``: histogram of tick lateness (us, log scale) with the deadline (one period) and the p99;
- ``fatigue.png`` (runs with a fatigue model): each stimulated channel's fitness and applied amplitude
  over time;
- ``summary.json``: the summary ``hil report`` prints (also its ``--json`` output).
"""
from __future__ import annotations

import json
import math
import os

import numpy as np

from drivers.core.contract import (
    KIND_TICK_STALL,
    STATUS_GH_UNSTABLE,
    STATUS_GH_ZEROED,
    STATUS_ROM,
    STATUS_ROM_ZEROED,
    STATUS_WATCHDOG,
)
from hil.config import service_config_from_dict
from hil.recording.hilrec import RecordingError, RecordingReader, read_run_recording
from hil.reports.passive_loads_figure import passive_loads_figure, passive_loads_summary
from hil.reports.run_metrics import config_target, run_metrics
from hil.rt.plants import plant_type
from hil.rt.stimulation import fatigue_channel_names
from sim.analysis.passive_limits import passive_load_history
from sim.output_file import output_file


def glenoid_angles(gh_force: np.ndarray, glenoid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """theta, phi (rad) of GH forces (n, 3, scapula frame) in the glenoid frame (spec "Outputs")."""
    f = gh_force @ glenoid.T
    return np.arctan2(f[:, 1], f[:, 0]), np.arctan2(f[:, 2], f[:, 0])


def pyplot_agg():
    """matplotlib's pyplot on the non-interactive Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def save_png(plt, fig, file: str) -> str:
    """Write ``fig`` to the PNG ``file`` (and close it); returns ``file``. A figure made with its own layout engine
    (``layout="constrained"``) keeps it; any other is laid out tight."""
    if fig.get_layout_engine() is None:
        fig.tight_layout()
    with output_file(file, "wb") as fh:
        fig.savefig(fh, dpi=100, format="png")
    plt.close(fig)
    return file


ANGLE_PANELS = (("clavicle and scapula", ("SC", "AC")), ("humerus", ("GH",)), ("elbow and forearm", ("EL", "PS")))
"""The joint-angle panels: title and the DOF name prefixes shown in it."""
STIMULATION_PANELS = (("amplitude (mA)", 1), ("pulse width (us)", 0), ("frequency (Hz)", 2))
"""The stimulation panels: y label and the index into a tick's applied [pw, amp, f, mode] per channel."""
MOVING_SPEED = math.radians(2.0)
"""rad/s: the arm moves while some DOF turns faster than this (the glenoid's colour map spans that time)."""


def stimulated_channels(applied: np.ndarray) -> list[int]:
    """Indices of the channels whose applied pulse width or amplitude is above 0 at some tick."""
    return np.flatnonzero(np.any(applied[:, :, :2] > 0, axis=(0, 2))).tolist()


def _angle_panel(ax, t, q, dof_names, joints, target) -> None:
    """The angles (deg) of the DOFs named ``joints*`` and, where one of them has it, the controller's target."""
    for j, name in enumerate(dof_names):
        if name.startswith(joints):
            ax.plot(t, np.degrees(q[:, j]), label=name)
    if target is not None and dof_names[target[0]].startswith(joints):
        deg = math.degrees(target[1])
        ax.axhline(deg, color="k", ls="--", lw=1.2, label=f"target {dof_names[target[0]]} {deg:g}")


def _stimulation_panels(axes, t, applied, channel_names) -> None:
    """Per stimulated channel: applied amplitude, pulse width and frequency over time, one panel each."""
    channels = stimulated_channels(applied)
    for ax, (ylabel, k) in zip(axes, STIMULATION_PANELS):
        for c in channels:
            ax.plot(t, applied[:, c, k], drawstyle="steps-post", label=channel_names[c])
        ax.set_ylabel(ylabel)
    axes[0].set_title("applied stimulation (after the safety rules)", fontsize=10)
    if not channels:
        axes[0].text(0.5, 0.5, "no channel stimulated", transform=axes[0].transAxes, ha="center", va="center")


def joint_angles_figure(plt, t, ticks: np.ndarray, dof_names, channel_names, target, title: str):
    """The joint angles (deg) in three panels with the controller's ``target`` (DOF index, rad) where it has
    one, above the applied stimulation per channel (amplitude, pulse width, frequency)."""
    n = len(ANGLE_PANELS)
    fig, axes = plt.subplots(n + len(STIMULATION_PANELS), 1, figsize=(10.5, 13), sharex=True,
                             gridspec_kw={"height_ratios": [3] * n + [2] * len(STIMULATION_PANELS)})
    for ax, (panel, joints) in zip(axes, ANGLE_PANELS):
        _angle_panel(ax, t, ticks["frame"]["q"], dof_names, joints, target)
        ax.set_ylabel(f"{panel} (deg)")
    _stimulation_panels(axes[n:], t, ticks["applied"], channel_names)
    for ax in axes[:n + 1]:        # the channels' colours are the same in every stimulation panel
        if ax.lines:
            ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("time (s)")
    axes[0].set_title(f"Joint angles — {title}")
    return fig


def _plot_joint_angles(plt, t, ticks, dof_names, channel_names, target, path: str, out_dir: str) -> str:
    """``joint_angles.png`` (joint_angles_figure); returns its path."""
    fig = joint_angles_figure(plt, t, ticks, dof_names, channel_names, target, os.path.basename(path))
    return save_png(plt, fig, os.path.join(out_dir, "joint_angles.png"))


def moving_span(t: np.ndarray, qdot: np.ndarray, speed: float = MOVING_SPEED) -> tuple[float, float]:
    """The first and last time (s) some DOF turns faster than ``speed`` (rad/s); the whole run if none does."""
    moving = np.flatnonzero(np.max(np.abs(qdot), axis=1) > speed)
    if moving.size == 0:
        return float(t[0]), float(t[-1])
    return float(t[moving[0]]), float(t[moving[-1]])


def glenoid_figure(plt, t, frame: np.ndarray, model):
    """The GH force direction (theta vs phi, deg) inside the glenoid rim, coloured by time while the arm moves
    (grey while it is still), GH-unstable ticks crossed."""
    theta, phi = np.degrees(glenoid_angles(frame["gh_force"], model.arrays.glenoid))
    ta, pa = model.arrays.gh_rim
    fig, ax = plt.subplots(figsize=(6.5, 6))
    e = np.linspace(0, 2 * math.pi, 200)
    ax.plot(np.degrees(pa * np.cos(e)), np.degrees(ta * np.sin(e)), "k-", label="glenoid rim")
    t0, t1 = moving_span(t, frame["qdot"])
    on = (t >= t0) & (t <= t1)
    ax.scatter(phi[~on], theta[~on], c="0.75", s=4, label="arm still")
    sc = ax.scatter(phi[on], theta[on], c=t[on], s=6, cmap="viridis", vmin=t0, vmax=max(t1, t0 + 1e-3))
    unstable = (frame["status"] & STATUS_GH_UNSTABLE) != 0
    ax.plot(phi[unstable], theta[unstable], "x", color="red", ms=6, label=f"GH unstable ({unstable.sum()} ticks)")
    ax.plot(phi[0], theta[0], "go", label="start")
    ax.plot(phi[-1], theta[-1], "rs", label="end")
    ax.set_xlabel("phi, anterior-posterior (deg)")
    ax.set_ylabel("theta, superior (+) / inferior (deg)")
    ax.set_aspect("equal")
    lim = max(60.0, float(np.nanmax(np.abs(np.r_[theta, phi]))) + 5)
    ax.set_xlim(-lim, lim)
    ax.set_ylim(-lim, lim)
    fig.colorbar(sc, ax=ax, label=f"time (s) while the arm moves, {t0:.2f}-{t1:.2f} s")
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title("GH force direction in the glenoid")
    return fig


def _plot_glenoid(plt, t: np.ndarray, frame: np.ndarray, model, out_dir: str) -> str:
    """``glenoid.png`` (glenoid_figure); returns its path."""
    return save_png(plt, glenoid_figure(plt, t, frame, model), os.path.join(out_dir, "glenoid.png"))


def lateness_figure(plt, lat_us: np.ndarray, period_s: float):
    """The histogram of tick lateness (us, log-log) with the deadline (one period late) and the p99 marked."""
    period_us = period_s * 1e6
    top = math.ceil(math.log10(max(float(lat_us.max()), period_us) * 2))
    fig, ax = plt.subplots(figsize=(9, 4))
    ax.hist(np.maximum(lat_us, 1e-3), bins=np.logspace(-3, top, 10 * (top + 3) + 1))
    p99 = float(np.percentile(lat_us, 99))
    ax.axvline(period_us, color="red", lw=1.5, label=f"deadline: one period late ({period_us:g} us)")
    ax.axvline(max(p99, 1e-3), color="darkorange", ls="--", lw=1.5, label=f"p99 {p99:.1f} us")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("tick lateness (us)")
    ax.set_ylabel("ticks")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_title(f"Tick lateness, period {period_s * 1e3:g} ms")
    return fig


def _plot_lateness(plt, lat_us: np.ndarray, period_s: float, out_dir: str) -> str:
    """``lateness.png`` (lateness_figure); returns its path."""
    return save_png(plt, lateness_figure(plt, lat_us, period_s), os.path.join(out_dir, "lateness.png"))


def _fatigue_channels(cfg, ticks: np.ndarray) -> list[tuple[int, str]]:
    """(index, name) of the stimulated channels of a run with a fatigue model (none otherwise)."""
    if "fitness" not in (ticks.dtype.names or ()):
        return []
    return [(c, n) for c, n in enumerate(fatigue_channel_names(cfg.stimulation))
            if np.any(ticks["applied"][:, c, 1] > 0)]


def _plot_fatigue(plt, t: np.ndarray, ticks: np.ndarray, channels, out_dir: str) -> str:
    """``fatigue.png``: fitness of the stimulated channels and the amplitude (mA) of those still on after
    the first second (whose onset transient is left off the scale); returns its path."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    settled = t > t[0] + 1.0
    for c, name in channels:
        top.plot(t, ticks["fitness"][:, c], label=name)
        if np.any(ticks["applied"][settled, c, 1] > 0):
            bottom.plot(t[settled], ticks["applied"][settled, c, 1], label=name)
    top.set_ylabel("fitness (1 = rested)")
    top.set_title("Stimulation fatigue (Ding et al. 2003)")
    bottom.set_ylabel("amplitude (mA)")
    bottom.set_xlabel("time (s)")
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=8, loc="best")
    return save_png(plt, fig, os.path.join(out_dir, "fatigue.png"))


def _fatigue_summary(t: np.ndarray, ticks: np.ndarray, channels) -> dict:
    """Per stimulated channel: final and lowest fitness, mean amplitude over the first and last 5 s (mA)."""
    first, last = t <= t[0] + 5.0, t >= t[-1] - 5.0
    return {name: {"fitness_end": float(ticks["fitness"][-1, c]), "fitness_min": float(ticks["fitness"][:, c].min()),
                   "amplitude_first_5s_ma": float(ticks["applied"][first, c, 1].mean()),
                   "amplitude_last_5s_ma": float(ticks["applied"][last, c, 1].mean())} for c, name in channels}


def _summary(path: str, reader: RecordingReader, ticks: np.ndarray, lat_us: np.ndarray, files: dict) -> dict:
    """The report's summary: tick counts, lateness percentiles, safety-status tick counts, elbow range."""
    frame = ticks["frame"]
    status = frame["status"]
    return {
        "recording": path, "ticks": int(len(ticks)), "duration_s": float(frame["time"][-1]),
        "truncated": reader.truncated, "warnings": reader.warnings,
        "lateness_us": {"p50": float(np.percentile(lat_us, 50)), "p99": float(np.percentile(lat_us, 99)),
                        "max": float(lat_us.max())},
        "deadline_misses": int(np.count_nonzero(ticks["skipped_deadlines"])),
        "gh_unstable_ticks": int(np.count_nonzero(status & STATUS_GH_UNSTABLE)),
        "watchdog_ticks": int(np.count_nonzero(status & STATUS_WATCHDOG)),
        "gh_zeroed_ticks": int(np.count_nonzero(status & STATUS_GH_ZEROED)),
        "rom_alarm_ticks": int(np.count_nonzero(status & STATUS_ROM)),
        "rom_zeroed_ticks": int(np.count_nonzero(status & STATUS_ROM_ZEROED)),
        "gh_stability_max": None if np.all(np.isnan(frame["gh_stability"])) else float(frame["gh_stability"].max()),
        "elbow_deg_range": [float(np.degrees(frame["elbow_flexion"].min())),
                            float(np.degrees(frame["elbow_flexion"].max()))],
        "commands": int(len(reader.read("commands"))),
        "tick_stalls": tick_stalls(reader.read("commands")),
        "files": files,
    }


def tick_stalls(commands: np.ndarray) -> list[dict]:
    """The run's tick stalls (KIND_TICK_STALL records): the tick in which the loop stalled, and how long it had
    not ticked when the run was ended, s."""
    stalls = commands[commands["kind"] == KIND_TICK_STALL]
    return [{"tick": int(c["tick"]), "duration_s": float(c["values"][0])} for c in stalls]


def make_report(path: str, out_dir: str) -> dict:
    """Write the PNG plots and ``summary.json`` of the recording ``path`` into ``out_dir``; returns the summary."""
    plt = pyplot_agg()
    reader = read_run_recording(path)
    h = reader.header
    cfg = service_config_from_dict(h["config"], h["config_path"])
    ticks = reader.read("ticks")
    if len(ticks) == 0:
        raise RecordingError(f"{path}: no ticks recorded (the run ended before its first tick); nothing to plot")
    frame = ticks["frame"]
    t = frame["time"]
    os.makedirs(out_dir, exist_ok=True)
    lat_us = ticks["lateness_ns"] / 1e3
    target = config_target(cfg, h["dof_names"])
    files = {"joint_angles": _plot_joint_angles(plt, t, ticks, h["dof_names"], h["channel_names"], target, path,
                                                out_dir)}
    kind = plant_type(cfg.plant.type)
    passive = None
    if kind.has_glenohumeral:           # hil.rt.plants: a plant without a GH model has no GH joint force
        model = kind.load_model(cfg)
        files["glenoid"] = _plot_glenoid(plt, t, frame, model, out_dir)
        passive = passive_load_history(model, frame["q"])
        files["passive_loads"] = save_png(plt, passive_loads_figure(plt, t, frame, passive),
                                          os.path.join(out_dir, "passive_loads.png"))
    files.update({"lateness": _plot_lateness(plt, lat_us, h["period_s"], out_dir),
                  "summary": os.path.join(out_dir, "summary.json")})
    fatigued = _fatigue_channels(cfg, ticks)
    if fatigued:
        files["fatigue"] = _plot_fatigue(plt, t, ticks, fatigued, out_dir)
    summary = _summary(path, reader, ticks, lat_us, files)
    summary["run_metrics"] = run_metrics(ticks, h["period_s"], h["channel_names"], target)
    if fatigued:
        summary["fatigue"] = _fatigue_summary(t, ticks, fatigued)
    if passive is not None:
        summary["passive_loads"] = passive_loads_summary(passive)
    with output_file(files["summary"], "w", encoding="utf-8") as fh:
        json.dump(summary, fh, indent=2)
    return summary
