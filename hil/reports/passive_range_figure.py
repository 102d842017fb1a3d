"""``passive_range.csv`` and ``passive_range.png`` of ``hil analyze passive-range``: the elbow under a standard
extension moment, none and a flexion moment (:mod:`sim.analysis.passive_range`), able-bodied and the patient, on
each plant."""
from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

from hil.reports.run_report import pyplot_agg, save_png
from sim.output_file import output_file

HOLD_COLOURS = ("tab:blue", "tab:grey", "tab:red")
"""Extension, rest and flexion holds (dashed able-bodied, solid the patient)."""


def write_passive_range(out_dir: Path, ranges: dict, title: str) -> tuple[Path, Path]:
    """``ranges``: (plant, arm) -> :class:`sim.analysis.passive_range.PassiveRange`, arm "able-bodied" or the
    patient's name. One CSV row per step, hold and arm; a panel per plant. Returns the two paths."""
    csv_path, png_path = out_dir / "passive_range.csv", out_dir / "passive_range.png"
    with output_file(csv_path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["plant", "arm", "moment_Nm", "t_s", "elbow_deg"])
        for (plant, arm), r in ranges.items():
            for moment, trace in r.traces.items():
                for k, q in enumerate(trace):
                    w.writerow([plant, arm, f"{moment:g}", f"{(k + 1) * r.step_s:.4f}", f"{math.degrees(q):.6f}"])
    plants = list(dict.fromkeys(plant for plant, _ in ranges))
    plt = pyplot_agg()
    fig, axes = plt.subplots(1, len(plants), figsize=(5 * len(plants), 4.5), sharey=True, squeeze=False)
    for ax, plant in zip(axes[0], plants):
        for (p, arm), r in ranges.items():
            if p != plant:
                continue
            style = "--" if arm == "able-bodied" else "-"
            for colour, (moment, trace) in zip(HOLD_COLOURS, r.traces.items()):
                t = np.arange(1, trace.size + 1) * r.step_s
                ax.plot(t, np.degrees(trace), style, color=colour, label=f"{arm}, {moment:+g} N m")
        ax.set_title(f"{title}: {plant} arm")
        ax.set_xlabel("time under the moment (s)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("elbow flexion (deg)")
    save_png(plt, fig, str(png_path))
    return csv_path, png_path
