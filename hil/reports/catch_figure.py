"""``catch.csv`` and ``catch.png`` of ``hil analyze catch``: the clinical catch test of a patient's spastic elbow
(:mod:`sim.fitting.spasticity`): the elbow angle and the reflex moment over a slow and a fast passive extension."""
from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

from hil.reports.run_report import pyplot_agg, save_png
from sim.output_file import output_file


def write_catch(out_dir: Path, runs: dict, step_s: float, title: str) -> tuple[Path, Path]:
    """``runs``: speed (deg/s) -> (elbow angle, rad, and reflex moment, N m, from the start of the extension).
    Writes one CSV row per step and speed and the two-panel figure; returns their paths."""
    csv_path, png_path = out_dir / "catch.csv", out_dir / "catch.png"
    with output_file(csv_path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["speed_deg_s", "t_s", "elbow_deg", "reflex_moment_Nm"])
        for speed, (angle, moment) in runs.items():
            for k, (q, m) in enumerate(zip(angle, moment)):
                w.writerow([f"{speed:g}", f"{k * step_s:.4f}", f"{math.degrees(q):.6f}", f"{m:.6f}"])
    plt = pyplot_agg()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for speed, (angle, moment) in runs.items():
        t = np.arange(angle.size) * step_s
        top.plot(t, np.degrees(angle), label=f"{speed:g} deg/s")
        bottom.plot(t, moment, label=f"{speed:g} deg/s (peak {np.max(moment):.2f} N m)")
    top.set_ylabel("elbow flexion (deg)")
    top.set_title(title)
    bottom.set_ylabel("reflex moment (N m, resisting)")
    bottom.set_xlabel("time from the start of the extension (s)")
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    save_png(plt, fig, str(png_path))
    return csv_path, png_path
