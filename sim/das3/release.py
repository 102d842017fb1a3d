"""The shipped DAS3 release-2 parameter files (``sim/data``, provenance in ``sim/data/README.md``), read as
published: the model, its passive equilibrium and the GH lines of action. Nothing here builds a model
(:func:`sim.das3.model.load_model`), so the config checks can name the model's muscles without a cycle.
"""
from __future__ import annotations

import functools
import hashlib
import json
from importlib import resources

import numpy as np

from sim.das3.kernels.polynomials import readonly


def read_model_data() -> tuple[dict, dict, dict, str]:
    """The parsed model, equilibrium and line-of-action files, and the sha256 of their bytes."""
    raw = [resources.files("sim.data").joinpath(n).read_bytes()
           for n in ("das3_model.json", "das3_equilibrium.json", "gh_lines_of_action.json")]
    return json.loads(raw[0]), json.loads(raw[1]), json.loads(raw[2]), hashlib.sha256(b"".join(raw)).hexdigest()


@functools.cache
def muscle_element_names() -> tuple[str, ...]:
    """The 138 muscle element names of the shipped model, in model order (for validating configs)."""
    return tuple(mu["name"] for mu in read_model_data()[0]["muscles"])


@functools.cache
def joint_location(name: str) -> np.ndarray:
    """Centre of a joint of the release's joint table in its parent segment's frame, m (e.g. ``rc``, the
    radiocarpal joint: the wrist, which no kernel needs)."""
    joints = {j["name"]: j for j in read_model_data()[0]["joints"]}
    return readonly(joints[name]["location"])


@functools.cache
def joint_axis(name: str, key: str = "r1_axis") -> np.ndarray:
    """Unit rotation axis ``key`` of a joint of the release's joint table, in its parent segment's frame (e.g.
    ``hu``: the elbow's flexion axis in the humerus frame; ``ur``: pronation in the ulna frame)."""
    axis = np.asarray({j["name"]: j for j in read_model_data()[0]["joints"]}[name][key], np.float64)
    return readonly(axis / np.linalg.norm(axis))


@functools.cache
def opensim_names() -> tuple[dict[str, str], dict[str, str]]:
    """The release's OpenSim names (``osim_name`` in ``das3_model.json``, the names of ``das3.osim``): DOF name ->
    coordinate (``ELx`` -> ``EL_x``) and muscle element name -> muscle (``trapscap1`` -> ``trap_scap_1``)."""
    m = read_model_data()[0]
    return ({d["name"]: d["osim_name"] for d in m["dofs"]}, {mu["name"]: mu["osim_name"] for mu in m["muscles"]})
