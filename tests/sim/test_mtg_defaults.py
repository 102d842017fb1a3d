"""The reduced arm's default parameters (sim/mtg/defaults.py, sim/data/mtg_default.json): derived from the DAS3
data they cite, reproducible, and the reduced arm that results rests where the DAS3 arm rests."""
from __future__ import annotations

import json
import math
import re
from importlib import resources

import numpy as np
import pytest

from sim.mtg.defaults import MTG_SOURCES, derive_defaults, passive_moments, read_source_csv
from sim.mtg.model import COORDINATES, DEFAULT_FILE, load_mtg_model


@pytest.fixture(scope="module")
def arm(model):
    return load_mtg_model(model)


def test_shipped_defaults_are_the_derivation_from_the_shipped_sources(model):
    shipped = json.loads(resources.files("sim.data").joinpath(DEFAULT_FILE).read_text())
    derived = derive_defaults(model)
    assert [e["name"] for e in shipped["mtgs"]] == [e["name"] for e in derived["mtgs"]]
    for s, d in zip(shipped["mtgs"], derived["mtgs"]):
        for key, value in d.items():
            assert s[key] == (pytest.approx(value, rel=1e-7) if isinstance(value, float) else value), (s["name"], key)


def test_every_mtg_names_source_files_that_exist():
    files = set(p.name for p in resources.files("sim.data").joinpath("mtg_source").iterdir())
    shipped = json.loads(resources.files("sim.data").joinpath(DEFAULT_FILE).read_text())
    for e in shipped["mtgs"]:
        named = re.findall(r"[\w-]+\.csv", e["source"])
        assert len(named) == 2 and set(named) <= files, e["source"]
        assert "Table A.2" in e["source"]


@pytest.mark.parametrize("src", MTG_SOURCES, ids=lambda s: s.name)
def test_maximum_torque_follows_the_das3_maximum_moments(arm, src):
    """tau_o tA(theta) against the DAS3 maximum isometric moments of the MTG's task (RMS within 12 % of the
    largest)."""
    spec = arm.params.mtgs[arm.params.index(src.name)]
    rows = read_source_csv(f"max_moment_{src.task}.csv")
    angles = np.radians([float(r["angle_deg"]) for r in rows])
    das3 = np.array([float(r["moment_Nm"]) for r in rows])
    mtg = np.array([spec.curves.tau_max * spec.curves.t_a(a)[0] for a in angles])
    assert np.sqrt(np.mean((mtg - das3) ** 2)) < 0.12 * das3.max()


@pytest.mark.parametrize("coordinate", ["elevation", "elbow_flexion", "pronation"])
def test_passive_torque_follows_the_das3_passive_moments(model, arm, coordinate):
    """The pair's passive torque (Eq. (3), a = 0, at rest) against the DAS3's passive moment (holding moments
    with every muscle inactive, minus gravity) over the swept range: within 3.5 N m or 30 % (the two-parameter
    tPE curve cannot follow the DAS3's sharp rise above 100 deg elevation; README "Reduced MTG arm")."""
    gravity_model = load_mtg_model(model)       # the derivation's gravity is the arm's own at a = 0 minus MTGs
    angles, passive = passive_moments(model, coordinate, _without_passive(gravity_model))
    c = COORDINATES.index(coordinate)
    specs = [s for s in arm.params.mtgs if s.coordinate == c]
    mtg = np.array([sum(s.direction * s.curves.torque(0.0, a, 0.0)[0] for s in specs) for a in angles])
    assert np.all(np.abs(mtg - passive) <= np.maximum(3.5, 0.3 * np.abs(passive)))


def _without_passive(arm):
    import dataclasses

    from sim.mtg.model import MtgModel, MtgParameters
    specs = tuple(dataclasses.replace(s, fit=dataclasses.replace(s.fit, lambda_p=1.0)) for s in arm.params.mtgs)
    return MtgModel(arm.das3, MtgParameters(specs))


def test_the_reduced_arm_rests_near_the_das3_rest(arm):
    """Gravity and the passive MTG torques balance near the DAS3's published equilibrium: elevation within
    1 deg, elbow and forearm within 6 deg (plane and axial rotation are coupled near the arm-down posture and are
    reported in the README)."""
    rest, das3 = np.degrees(arm.equilibrium_state[:5]), np.degrees(arm.das3_posture)
    assert abs(rest[1] - das3[1]) < 1.0
    assert abs(rest[3] - das3[3]) < 6.0 and abs(rest[4] - das3[4]) < 6.0
    assert np.max(np.abs(arm.generalized_forces(arm.equilibrium_state[:5]))) < 1e-9
    assert math.isfinite(rest[0]) and math.isfinite(rest[2])


def test_hil_model_mtg_defaults_writes_the_shipped_parameters(tmp_path):
    from helpers import hil
    out = tmp_path / "mtg.json"
    done = hil("model", "mtg-defaults", "--out", out)
    assert done.returncode == 0, done.stderr
    written, shipped = json.loads(out.read_text()), json.loads(resources.files("sim.data").joinpath(DEFAULT_FILE).read_text())
    assert [e["name"] for e in written["mtgs"]] == [e["name"] for e in shipped["mtgs"]]
    for w, s in zip(written["mtgs"], shipped["mtgs"]):
        assert w == {k: pytest.approx(v, rel=1e-7) if isinstance(v, float) else v for k, v in s.items()}, w["name"]
