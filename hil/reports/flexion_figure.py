"""The played feed-forward movement in the form of Chadwick et al. 2014 Fig. 3: clavicle (thorax-clavicle,
panel A), scapula (clavicle-scapula, panel B) and thoracohumeral angles (panel C) against time, with the GH
force direction in the glenoid ellipse from "Start" to "Finish" (the paper's inset; §II-D polar plot).

Angles in the files are degrees (columns end in ``_deg``).
"""
from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

from hil.reports.run_report import glenoid_angles, pyplot_agg, save_png
from sim.analysis.feedforward import Playback
from sim.das3.model import DOF_NAMES
from sim.output_file import output_file

TH_NAMES = ("plane of elevation", "elevation", "axial rotation")
PANELS = (("A  thorax - clavicle", ("SCy", "SCz", "SCx")), ("B  clavicle - scapula", ("ACy", "ACz", "ACx")))


def write_playback(path: Path, pb: Playback, model) -> None:
    """``played.csv``: time, thoracohumeral and girdle angles, GH force direction and stability per step."""
    theta, phi = glenoid_angles(pb.gh_force, model.arrays.glenoid)
    girdle = [DOF_NAMES.index(n) for _, names in PANELS for n in names]
    with output_file(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["time_s", "plane_deg", "elevation_deg", "axial_rotation_deg",
                    *(f"{DOF_NAMES[i]}_deg" for i in girdle), "gh_theta_deg", "gh_phi_deg", "gh_stability"])
        for k, t in enumerate(pb.times):
            values = [*np.degrees(pb.th_angles[k]), *np.degrees(pb.q[k, girdle]), math.degrees(theta[k]),
                      math.degrees(phi[k]), pb.gh_stability[k]]
            w.writerow([f"{t:.3f}", *(f"{v:.4f}" for v in values)])


def _glenoid_inset(ax, pb: Playback, model) -> None:
    theta, phi = np.degrees(glenoid_angles(pb.gh_force, model.arrays.glenoid))
    ta, pa = model.arrays.gh_rim
    e = np.linspace(0, 2 * math.pi, 200)
    ax.plot(np.degrees(pa * np.cos(e)), np.degrees(ta * np.sin(e)), "k-", lw=1)
    ax.plot(phi, theta, "-", color="tab:blue", lw=1.2)
    ax.plot(phi[0], theta[0], "go")
    ax.plot(phi[-1], theta[-1], "rs")
    ax.annotate("Start", (phi[0], theta[0]), textcoords="offset points", xytext=(6, 4), fontsize=8)
    ax.annotate("Finish", (phi[-1], theta[-1]), textcoords="offset points", xytext=(6, -10), fontsize=8)
    ax.set_xlabel("phi, anterior-posterior (deg)", fontsize=8)
    ax.set_ylabel("theta, superior + (deg)", fontsize=8)
    ax.set_aspect("equal")
    ax.tick_params(labelsize=7)
    ax.set_title("GH force in the glenoid", fontsize=9)


def plot_playback(path: Path, pb: Playback, model, title: str) -> None:
    """The Fig. 3 form: panels A-C against time and the glenoid inset beside panel C."""
    plt = pyplot_agg()
    fig = plt.figure(figsize=(9, 9))
    grid = fig.add_gridspec(3, 2, width_ratios=(3, 1.4))
    for row, (label, names) in enumerate(PANELS):
        ax = fig.add_subplot(grid[row, :])
        for name in names:
            ax.plot(pb.times, np.degrees(pb.q[:, DOF_NAMES.index(name)]), label=name)
        ax.set_title(label, loc="left", fontsize=10)
        ax.set_ylabel("angle (deg)")
        ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
    ax = fig.add_subplot(grid[2, 0])
    for k, name in enumerate(TH_NAMES):
        ax.plot(pb.times, np.degrees(pb.th_angles[:, k]), label=name)
    ax.set_title("C  thorax - humerus (YZY)", loc="left", fontsize=10)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("angle (deg)")
    ax.legend(fontsize=8)
    _glenoid_inset(fig.add_subplot(grid[2, 1]), pb, model)
    fig.suptitle(title, fontsize=10)
    save_png(plt, fig, str(path))
