"""The shipped model and comparison data are the documented, unmodified files."""
import hashlib
import json
import re
from importlib import resources

import pytest

FILES = ("das3_model.json", "das3_equilibrium.json", "gh_lines_of_action.json", "isometric_moments_literature.csv",
         "shoulder_rhythm_degroot2001.json")


def data(name: str):
    return resources.files("sim.data").joinpath(name)


@pytest.mark.parametrize("name", FILES)
def test_sha256_matches_the_data_readme(name):
    readme = data("README.md").read_text(encoding="utf-8")
    documented = dict(re.findall(r"\| `([\w.]+\.(?:json|csv))` \| `([0-9a-f]{64})` \|", readme))
    assert set(documented) == set(FILES)
    assert hashlib.sha256(data(name).read_bytes()).hexdigest() == documented[name]


def test_basic_shapes():
    model = json.loads(data("das3_model.json").read_text())
    assert [d["name"] for d in model["dofs"]] == [
        "SCy", "SCz", "SCx", "ACy", "ACz", "ACx", "GHy", "GHz", "GHyy", "ELx", "PSy"]
    assert len(model["muscles"]) == 138
    assert min(min(m["dof_indices"]) for m in model["muscles"]) == 0  # 0-based
    assert len(json.loads(data("das3_equilibrium.json").read_text())["x"]) == 298
    loa = json.loads(data("gh_lines_of_action.json").read_text())
    assert loa["dof_indices_base"] == 0
    assert len(loa["muscles"]) == sum(bool(m["crossesGH"]) for m in model["muscles"]) == 67


def test_a_muscle_whose_dofs_are_not_one_range_is_refused():
    """The kernels index a muscle's DOFs as its first + k; the shipped data satisfy it, other data must too."""
    import copy

    from sim.das3.kernels.polynomials import MonomialTable
    from sim.das3.model import _muscle_constants
    from sim.das3.release import read_model_data

    muscles = copy.deepcopy(read_model_data()[0]["muscles"])
    _muscle_constants(copy.deepcopy(muscles), MonomialTable())        # the shipped DOFs are accepted
    bad = next(mu for mu in muscles if len(mu["dof_indices"]) == 3)
    bad["dof_indices"] = [bad["dof_indices"][0], bad["dof_indices"][1], bad["dof_indices"][2] + 1]
    with pytest.raises(ValueError, match=f"muscle {bad['name']}: DOFs .* not one contiguous range"):
        _muscle_constants(muscles, MonomialTable())
