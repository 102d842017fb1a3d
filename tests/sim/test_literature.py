"""The model's standing against the published maximum moments (sim.analysis.literature)."""
from __future__ import annotations

import math

import numpy as np

from sim.analysis.literature import literature_curves, spread_band, study_ratios, within_spread

DEG = math.pi / 180


def test_ratios_use_each_study_only_inside_its_angles():
    garner = next(c for c in literature_curves("shoulder-extension") if c.source == "Garner2001")
    angles = np.array([garner.angle_rad[0], garner.angle_rad[-1], garner.angle_rad[-1] + 30 * DEG])
    moments = np.array([2 * garner.moment_nm[0], 0.5 * garner.moment_nm[-1], 1000.0])
    (ratio,) = [r for r in study_ratios("shoulder-extension", angles, moments) if r.label.startswith("Garner")]
    assert math.isclose(ratio.ratio_min, 0.5) and math.isclose(ratio.ratio_max, 2.0)


def test_spread_band_spans_lowest_to_highest_study_with_margin():
    angles = np.radians([30.0, 60.0])
    low, high = spread_band("shoulder-flexion", angles)
    assert np.all(low < high)
    inside = within_spread("shoulder-flexion", angles, low * 0.8 + 1e-9)
    below = within_spread("shoulder-flexion", angles, low * 0.79)
    above = within_spread("shoulder-flexion", angles, high * 1.21)
    assert inside.all() and not below.any() and not above.any()
    assert within_spread("shoulder-flexion", np.radians([200.0]), [1e6]).all()   # no study there
