"""``passive_loads.png`` and the summary's ``passive_loads`` in ``hil report`` for a run of a plant with a shoulder
girdle: how deep the scapula's TS and AI sit in the thorax ellipsoid and how far the conoid is stretched, against
the limits the maximum-moment analysis holds the arm to (:mod:`sim.analysis.passive_limits`: no deeper than at
rest, the conoid within its elongation to failure, Harris et al. 2000). The plant itself has no such limit (its
contact and conoid are penalty springs, Chadwick et al. 2014 §II-B5): these show when a controller drives the
girdle where those springs carry loads no shoulder is known to carry."""
from __future__ import annotations

import numpy as np

from sim.analysis.passive_limits import PassiveLoadHistory

CONTACT_POINTS = ("TS", "AI")
DEPTH_TOLERANCE_E = 1e-4
"""A tick counts as deeper than rest when E is below the rest depth by more than this (about 10 um of depth on
the release's thorax ellipsoid: the solver's noise at the published equilibrium is far below it)."""


def passive_loads_figure(plt, t: np.ndarray, frame: np.ndarray, history: PassiveLoadHistory):
    """Three panels over time: E of TS and AI with the rest depth, the recorded contact force magnitudes (N),
    and the conoid's elongation (mm) with its elongation to failure."""
    fig, (depth, force, conoid) = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
    for k, name in enumerate(CONTACT_POINTS):
        depth.plot(t, history.contact_e[:, k], label=f"E({name})")
        force.plot(t, np.linalg.norm(frame["st_contact_force"][:, k], axis=1), label=f"|F({name})|")
    depth.axhline(history.contact_e_min, color="red", ls="--", label="rest depth (analysis limit)")
    depth.set_ylabel("contact E (< 0: inside the thorax)")
    depth.set_title("Scapulothoracic contact and conoid ligament")
    force.set_ylabel("contact force (N)")
    conoid.plot(t, history.conoid_elongation_m * 1e3, label="conoid elongation from rest")
    conoid.axhline(history.conoid_elongation_max_m * 1e3, color="red", ls="--",
                   label="elongation to failure (Harris et al. 2000)")
    conoid.set_ylabel("elongation (mm)")
    conoid.set_xlabel("time (s)")
    for ax in (depth, force, conoid):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="best")
    return fig


def passive_loads_summary(history: PassiveLoadHistory) -> dict:
    """The deepest E per contact point, the largest conoid elongation (mm), and how many ticks went beyond
    the analysis limits."""
    deeper = history.contact_e < history.contact_e_min - DEPTH_TOLERANCE_E
    return {"contact_e_min": {n: float(history.contact_e[:, k].min()) for k, n in enumerate(CONTACT_POINTS)},
            "rest_depth_e": history.contact_e_min,
            "ticks_deeper_than_rest": int(np.count_nonzero(deeper.any(axis=1))),
            "conoid_elongation_max_mm": float(history.conoid_elongation_m.max() * 1e3),
            "conoid_elongation_to_failure_mm": history.conoid_elongation_max_m * 1e3,
            "ticks_conoid_beyond_failure": int(np.count_nonzero(
                history.conoid_elongation_m > history.conoid_elongation_max_m))}
