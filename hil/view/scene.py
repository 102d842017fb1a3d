"""What the page draws, as JSON-ready samples: the same for a live run (one sample per read of the status
block) and a replay (samples picked from the recording).

A sample holds the tick and simulated time, q and the thoracohumeral angles (rad), the arm's points from
the model's kinematics (:func:`sim.das3.kinematics.landmarks`, m, thorax frame) and the glenoid axis, the GH
force direction in the glenoid (theta, phi, rad: :func:`hil.reports.run_report.glenoid_angles`, the angles of the
paper's Fig. 3 inset) with the stability value (eq. 9), each channel's applied pulse, the tick's lateness
and compute time (s), deadline misses, status bits and the safety counters. Radians and SI units all the
way to the page, which converts to degrees and microseconds for display.
"""
from __future__ import annotations

import json

import numpy as np

from drivers.core.contract import STATUS_BITS
from hil.reports.run_report import glenoid_angles
from hil.rt.plants import plant_type
from hil.rt.stimulation import default_channel_name
from sim.das3.kinematics import LANDMARKS, glenoid_axis, landmarks, thorax_ellipsoid
from sim.das3.model import DOF_NAMES, load_model

HISTORY_S = 10.0
"""Seconds of angle and timing traces the page keeps."""

TRAIL_S = 2.0
"""Seconds of GH force directions drawn as the marker's trail."""


def channel_table(stimulation: dict) -> list[dict]:
    """Name and amplitude limit (mA) of each ``[[stimulation.channel]]`` of a validated table (none in
    direct mode): the page's stimulation bars."""
    if stimulation.get("mode", "channels") != "channels":
        return []
    return [{"name": str(ch.get("name", default_channel_name(i))),
             "max_amplitude_ma": float(ch.get("max_amplitude_ma", 100.0))}
            for i, ch in enumerate(stimulation.get("channel", []))]


def _finite(a: np.ndarray, decimals: int) -> list:
    """``a`` rounded, as nested lists with None where it is not finite (JSON has no NaN)."""
    a = np.asarray(a, np.float64)
    out = np.round(a, decimals).astype(object)
    out[~np.isfinite(a)] = None
    return out.tolist()


class Scene:
    """The run's fixed facts for the page (:meth:`info`) and its samples (:meth:`samples`)."""

    def __init__(self, cfg, identity: dict) -> None:
        self.cfg = cfg
        # the joint geometry is the release's for every model option but a patient's size (sim.subject_size); only
        # the rim comes from the config
        self.length_scale = cfg.model.length_scale
        self.arrays = load_model(cfg.model).arrays if cfg.model.sized else load_model().arrays
        self.glenoid = np.asarray(self.arrays.glenoid)
        self.has_gh = plant_type(cfg.plant.type).has_glenohumeral
        self.channels = channel_table(cfg.stimulation)
        self.identity = dict(identity)

    def info(self, **extra) -> dict:
        centre, radii = thorax_ellipsoid(self.arrays)
        return {**self.identity, "plant": self.cfg.plant.type, "period_s": self.cfg.loop.period_s,
                "dof_names": list(DOF_NAMES), "channels": self.channels,
                "landmarks": list(LANDMARKS), "thorax": {"centre": centre.tolist(), "radii": radii.tolist()},
                "rim": [self.cfg.model.gh_rim_theta, self.cfg.model.gh_rim_phi], "has_gh": self.has_gh,
                "status_bits": [name for name, _ in STATUS_BITS], "history_s": HISTORY_S, "trail_s": TRAIL_S,
                **extra}

    def samples(self, c: dict) -> list[dict]:
        """Samples from columns of n rows: ``tick``, ``time_s``, ``q`` (n, 11), ``th_angles``, ``gh_force``
        (n, 3), ``gh_stability``, ``status``, ``applied`` (n, channels, 3), ``lateness_s``,
        ``max_lateness_s``, ``compute_s``, ``deadline_misses`` and ``counts`` (n, 3: watchdog trips,
        GH-unstable and ROM-alarm ticks)."""
        q = np.asarray(c["q"], np.float64)
        pts = _finite(landmarks(self.arrays, q, self.length_scale).reshape(len(q), -1), 5)
        axis = _finite(glenoid_axis(self.arrays, q), 4)
        gh = self._glenoid(c)
        rows = zip(np.asarray(c["tick"]).tolist(), _finite(c["time_s"], 6), _finite(q, 6),
                   _finite(c["th_angles"], 6), pts, axis, gh, _finite(c["applied"], 3), _finite(c["lateness_s"], 8),
                   _finite(c["max_lateness_s"], 8), _finite(c["compute_s"], 8),
                   np.asarray(c["deadline_misses"]).tolist(), np.asarray(c["status"]).tolist(),
                   np.asarray(c["counts"]).tolist())
        keys = ("tick", "t", "q", "th", "pts", "gax", "gh", "stim", "lat", "latmax", "comp", "misses", "status",
                "counts")
        return [dict(zip(keys, row)) for row in rows]

    def _glenoid(self, c: dict) -> list:
        """[theta, phi, stability] per row (None where the plant has no GH joint or the force is not finite)."""
        force = np.asarray(c["gh_force"], np.float64)
        if not self.has_gh:
            return [None] * len(force)
        theta, phi = glenoid_angles(force, self.glenoid)
        values = _finite(np.column_stack([theta, phi, c["gh_stability"]]), 6)
        return [None if None in v else v for v in values]


def dumps(doc) -> bytes:
    """Compact JSON bytes."""
    return json.dumps(doc, separators=(",", ":")).encode()
