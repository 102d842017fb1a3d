"""Model configuration: published defaults and precise errors for bad files."""
import dataclasses
import math
from pathlib import Path

import pytest

from sim.das3.config import ConfigError, ModelConfig, load_model_config

REPO = Path(__file__).resolve().parents[2]


def write(tmp_path, text):
    path = tmp_path / "model.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_are_the_published_values():
    c = ModelConfig()
    assert c.hand_weight is False
    assert c.gh_rim_theta == pytest.approx(math.radians(44.37), rel=1e-15)
    assert c.gh_rim_phi == pytest.approx(math.radians(38.55), rel=1e-15)
    assert (c.joint_k1, c.joint_k2, c.joint_damping) == (1.0, 5000.0, 1.0)
    assert c.muscle_model == "das3" and c.shoulder_passive == "das3"
    assert [f.name for f in dataclasses.fields(c)] == [
        "hand_weight", "gh_rim_theta", "gh_rim_phi", "joint_k1", "joint_k2", "joint_damping", "muscle_model",
        "shoulder_passive", "strength", "denervated", "spasticity", "contracture",
        "length_scale", "mass_scale", "force_scale"]
    assert c.strength == () and c.denervated == () and c.spasticity == () and c.contracture == ()
    assert (c.length_scale, c.mass_scale, c.force_scale) == (1.0, 1.0, 1.0) and not c.sized


def test_model_config_is_frozen_and_hashable():
    c = ModelConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.joint_k1 = 2.0  # type: ignore[misc]
    assert hash(c) == hash(ModelConfig())


def test_shipped_config_file_equals_defaults():
    assert load_model_config(REPO / "configs" / "model.toml") == ModelConfig()


@pytest.mark.parametrize("text", ["", "[model]\n"])
def test_empty_file_gives_defaults(tmp_path, text):
    assert load_model_config(write(tmp_path, text)) == ModelConfig()


def test_values_are_read_and_angles_converted_to_radians(tmp_path):
    c = load_model_config(write(tmp_path, "[model]\nhand_weight = true\ngh_rim_theta_deg = 30\n"
                                          "gh_rim_phi_deg = 45.5\njoint_k1 = 5\njoint_k2 = 0\n"
                                          "joint_damping = 0.5\n"))
    assert c == ModelConfig(hand_weight=True, gh_rim_theta=math.radians(30.0),
                            gh_rim_phi=math.radians(45.5), joint_k1=5.0, joint_k2=0.0, joint_damping=0.5)
    assert isinstance(c.joint_k1, float)


@pytest.mark.parametrize("line, key, words", [
    ("joint_k3 = 1.0", "joint_k3", "unknown key 'joint_k3' (did you mean 'joint_k2'?)"),
    ("gh_rim_theta = 0.7", "gh_rim_theta", "did you mean 'gh_rim_theta_deg'?"),
    ("hand_weight = 1", "hand_weight", "true or false"),
    ("hand_weight = 'no'", "hand_weight", "true or false"),
    ("joint_k1 = 'stiff'", "joint_k1", "must be a number"),
    ("joint_k2 = true", "joint_k2", "must be a number"),
    ("joint_damping = [1.0]", "joint_damping", "must be a number"),
    ("joint_k1 = inf", "joint_k1", "finite"),
    ("joint_k2 = nan", "joint_k2", "finite"),
    ("gh_rim_phi_deg = -inf", "gh_rim_phi_deg", "finite"),
    ("joint_k1 = -0.1", "joint_k1", ">= 0"),
    ("joint_k2 = -1", "joint_k2", ">= 0"),
    ("joint_damping = -1e-9", "joint_damping", ">= 0"),
    ("gh_rim_theta_deg = 0", "gh_rim_theta_deg", "between 0 and 90 degrees"),
    ("gh_rim_theta_deg = 90", "gh_rim_theta_deg", "between 0 and 90 degrees"),
    ("gh_rim_phi_deg = 120.0", "gh_rim_phi_deg", "between 0 and 90 degrees"),
    ("gh_rim_phi_deg = -10.0", "gh_rim_phi_deg", "between 0 and 90 degrees"),
    ("muscle_model = 'thelen'", "muscle_model", "must be one of das3, thelen2003"),
    ("muscle_model = 1", "muscle_model", "must be one of das3, thelen2003"),
    ("strength = 0.5", "strength", "must be a table of muscle element or group"),
    ("strength = {bicps = 0.5}", "strength", "unknown muscle element or group 'bicps'"),
    ("strength = {bicb = 0}", "strength", "factor of 'bicb' must be a number in (0, 10]"),
    ("strength = {bicb = 10.5}", "strength", "factor of 'bicb' must be a number in (0, 10]"),
    ("strength = {bicb = true}", "strength", "factor of 'bicb' must be a number"),
    ("strength = {bicb = nan}", "strength", "factor of 'bicb' must be a number"),
])
def test_bad_value_names_file_and_key(tmp_path, line, key, words):
    valid = "joint_damping = 1.0" if key != "joint_damping" else "joint_k2 = 1.0"
    path = write(tmp_path, f"[model]\n{valid}\n{line}\n")
    with pytest.raises(ConfigError) as info:
        load_model_config(path)
    err = info.value
    assert isinstance(err, ValueError)
    assert err.key == key and err.file == str(path)
    assert str(path) in str(err) and f"'{key}'" in str(err) and words in str(err)


def test_unknown_table(tmp_path):
    path = write(tmp_path, "[modle]\nhand_weight = false\n")
    with pytest.raises(ConfigError, match=r"unknown table 'modle' \(did you mean 'model'\?\)") as info:
        load_model_config(path)
    assert info.value.key == "modle"


def test_top_level_key_outside_the_table(tmp_path):
    with pytest.raises(ConfigError, match="unknown table 'joint_k1'"):
        load_model_config(write(tmp_path, "joint_k1 = 2.0\n"))


def test_model_must_be_a_table(tmp_path):
    with pytest.raises(ConfigError, match="must be a table") as info:
        load_model_config(write(tmp_path, "model = 3\n"))
    assert info.value.key == "model"


def test_invalid_toml(tmp_path):
    path = write(tmp_path, "[model]\njoint_k1 = = 2\n")
    with pytest.raises(ConfigError, match="invalid TOML") as info:
        load_model_config(path)
    assert info.value.file == str(path) and info.value.key is None


def test_missing_file(tmp_path):
    path = tmp_path / "missing.toml"
    with pytest.raises(ConfigError, match="cannot read file") as info:
        load_model_config(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("field, value", [
    ("gh_rim_theta", 0.0), ("gh_rim_phi", math.pi / 2), ("gh_rim_theta", math.nan),
    ("joint_k1", -1.0), ("joint_k2", math.inf), ("joint_damping", "1"), ("hand_weight", 0),
    ("strength", (("bicb", -1.0),)), ("strength", (("biceps", 0.5),)),
])
def test_constructor_validates_fields(field, value):
    with pytest.raises(ConfigError) as info:
        ModelConfig(**{field: value})
    assert info.value.key == field and f"'{field}'" in str(info.value)
