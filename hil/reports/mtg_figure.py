"""Before/after envelope plots of an MTG fit (Millard et al. 2019, Figs. 4-5): per coordinate, the torque the
motion demands of each MTG against what the MTG can give at every sample, between zero activation (the passive
torque, Eq. (3) with a = 0) and a_max, before and after fitting."""
from __future__ import annotations

import numpy as np

from hil.reports.run_report import pyplot_agg, save_png
from sim.fitting.mtg_fit import demanded_torque
from sim.mtg.curves import FitParameters, MtgCurves
from sim.mtg.model import COORDINATES


def envelope(curves: MtgCurves, fit: FitParameters, direction: int, theta, dtheta, a: float) -> np.ndarray:
    """Eq. (3) along the MTG's direction at activation ``a`` for every sample (N m)."""
    return np.array([curves.torque(a, th, direction * om, fit)[0] for th, om in zip(theta, dtheta)])


def _panel(ax, mtg, spec, motion, c: int, a_max: float) -> None:
    theta, dtheta = motion.q[:, c], motion.qd[:, c]
    deg = np.degrees(theta)
    order = np.argsort(deg)
    demand = demanded_torque(motion.torque[:, c], mtg.direction)
    for fit, style, label in ((mtg.start, ":", "before"), (mtg.fitted, "-", "after")):
        top = envelope(spec.curves, fit, mtg.direction, theta, dtheta, a_max)
        low = envelope(spec.curves, fit, mtg.direction, theta, dtheta, 0.0)
        ax.plot(deg[order], top[order], "C0" + style, label=f"a = a_max, {label}")
        ax.plot(deg[order], low[order], "C2" + style, label=f"a = 0 (passive), {label}")
    ax.plot(deg, demand, "k.", ms=2, label="demanded (Eq. 7)")
    ok = "feasible" if mtg.check_after.feasible else "INFEASIBLE"
    ax.set_title(f"{spec.name}: before {'ok' if mtg.check_before.feasible else 'infeasible'}, after {ok}",
                 fontsize=9)
    ax.set_xlabel(f"{COORDINATES[c].replace('_', ' ')} (deg)")
    ax.set_ylabel("torque along the MTG (N m)")


def plot_envelopes(arm_fit, motion, a_max: float, file: str) -> str:
    """One panel per MTG (rows: coordinates; columns: direction +1, -1); returns ``file``."""
    plt = pyplot_agg()
    fig, axes = plt.subplots(len(COORDINATES), 2, figsize=(11, 3.0 * len(COORDINATES)), squeeze=False)
    for c, coord in enumerate(COORDINATES):
        fit, idx = arm_fit.joints[coord]
        for k, (mtg, i) in enumerate(sorted(zip(fit.mtgs, idx), key=lambda p: -p[0].direction)):
            _panel(axes[c, k], mtg, arm_fit.start.mtgs[i], motion, c, a_max)
    axes[0, 0].legend(fontsize=7, loc="best")
    fig.suptitle(f"MTG envelopes before and after fitting (a_max = {a_max:g})")
    return save_png(plt, fig, file)

