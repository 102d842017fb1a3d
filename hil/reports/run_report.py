"""``hil report``: PNG plots and a summary of a recording.

- ``joint_angles.png``: the 11 joint angles (deg) over time, one panel each for the clavicle and
  scapula (SC, AC), the humerus (GH) and the elbow and forearm (EL, PS);
- ``glenoid.png``: the GH joint force direction inside the glenoid ellipse (theta superior-inferior vs
  phi anterior-posterior, deg, rim half-angles from the recorded model config), as in the inset of
  Chadwick et al. 2014 Fig. 3, coloured by time;
- ``lateness.png``: histogram of tick lateness (us, log scale);
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
from hil.reports.run_metrics import config_target, run_metrics
from hil.rt.stimulation import fatigue_channel_names
from sim.das3.model import load_model


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
    """Write ``fig`` to the PNG ``file`` (and close it); returns ``file``."""
    fig.tight_layout()
    fig.savefig(file, dpi=100)
    plt.close(fig)
    return file


def _plot_joint_angles(plt, t: np.ndarray, frame: np.ndarray, dof_names, path: str, out_dir: str) -> str:
    """``joint_angles.png``: the joint angles (deg) over time in three panels; returns its path."""
    panels = (("clavicle and scapula", ("SC", "AC")), ("humerus", ("GH",)), ("elbow and forearm", ("EL", "PS")))
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 8), sharex=True)
    for ax, (title, joints) in zip(axes, panels):
        for j, name in enumerate(dof_names):
            if name.startswith(joints):
                ax.plot(t, np.degrees(frame["q"][:, j]), label=name)
        ax.set_ylabel(f"{title} (deg)")
        ax.legend(ncol=3, fontsize=8, loc="best")
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("time (s)")
    axes[0].set_title(f"Joint angles — {os.path.basename(path)}")
    return save_png(plt, fig, os.path.join(out_dir, "joint_angles.png"))


def _plot_glenoid(plt, t: np.ndarray, frame: np.ndarray, model, out_dir: str) -> str:
    """``glenoid.png``: the GH force direction (theta vs phi, deg) inside the glenoid rim; returns its path."""
    theta, phi = glenoid_angles(frame["gh_force"], model.arrays.glenoid)
    ta, pa = model.arrays.gh_rim
    fig, ax = plt.subplots(figsize=(6, 6))
    e = np.linspace(0, 2 * math.pi, 200)
    ax.plot(np.degrees(pa * np.cos(e)), np.degrees(ta * np.sin(e)), "k-", label="glenoid rim")
    sc = ax.scatter(np.degrees(phi), np.degrees(theta), c=t, s=6, cmap="viridis")
    ax.plot(np.degrees(phi[0]), np.degrees(theta[0]), "go", label="start")
    ax.plot(np.degrees(phi[-1]), np.degrees(theta[-1]), "rs", label="end")
    ax.set_xlabel("phi, anterior-posterior (deg)")
    ax.set_ylabel("theta, superior (+) / inferior (deg)")
    ax.set_aspect("equal")
    lim = max(60.0, float(np.nanmax(np.abs(np.degrees(np.r_[theta, phi])))) + 5)
    ax.set_xlim(-lim, lim)
    ax.set_ylim(-lim, lim)
    fig.colorbar(sc, ax=ax, label="time (s)")
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title("GH force direction in the glenoid")
    return save_png(plt, fig, os.path.join(out_dir, "glenoid.png"))


def _plot_lateness(plt, lat_us: np.ndarray, period_s: float, out_dir: str) -> str:
    """``lateness.png``: the histogram of tick lateness (us, log-log); returns its path."""
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.hist(np.maximum(lat_us, 1e-3), bins=np.logspace(-3, 4, 71))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("tick lateness (us)")
    ax.set_ylabel("ticks")
    ax.set_title(f"Tick lateness, period {period_s * 1e3:g} ms")
    return save_png(plt, fig, os.path.join(out_dir, "lateness.png"))


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
    model = load_model(cfg.model)
    ticks = reader.read("ticks")
    if len(ticks) == 0:
        raise RecordingError(f"{path}: no ticks recorded (the run ended before its first tick); nothing to plot")
    frame = ticks["frame"]
    t = frame["time"]
    os.makedirs(out_dir, exist_ok=True)
    lat_us = ticks["lateness_ns"] / 1e3
    files = {"joint_angles": _plot_joint_angles(plt, t, frame, h["dof_names"], path, out_dir)}
    if cfg.plant.type == "das3":           # the reduced MTG arm has no GH joint force
        files["glenoid"] = _plot_glenoid(plt, t, frame, model, out_dir)
    files.update({"lateness": _plot_lateness(plt, lat_us, h["period_s"], out_dir),
                  "summary": os.path.join(out_dir, "summary.json")})
    fatigued = _fatigue_channels(cfg, ticks)
    if fatigued:
        files["fatigue"] = _plot_fatigue(plt, t, ticks, fatigued, out_dir)
    summary = _summary(path, reader, ticks, lat_us, files)
    summary["run_metrics"] = run_metrics(ticks, h["period_s"], h["channel_names"],
                                         config_target(cfg, h["dof_names"]))
    if fatigued:
        summary["fatigue"] = _fatigue_summary(t, ticks, fatigued)
    with open(files["summary"], "w", encoding="utf-8") as fh:
        json.dump(summary, fh, indent=2)
    return summary
