"""Subject size (issue 37, item 5): the DAS3 arm scaled uniformly to a patient's height and body mass.

Uniform scaling keeps the model's proportions, as anthropometric tables do: de Leva (1996, J Biomech
29:1223-1230, Table 4) gives each segment's length as a fixed fraction of stature and its mass as a fixed
fraction of body mass. With a length scale s_L and a mass scale s_m:

- every length of the model x s_L: joint centres, centres of mass, the conoid ligament's attachments, length and
  smoothing width, the thorax ellipsoid and the scapula's contact points, Lceopt, the tendon (SEE) slack length
  and each muscle path L(q) (its polynomial coefficients x s_L, so L, dL/dq and the moment arms scale exactly);
  PEE slack (in Lceopt), pennation, vmax (Lceopt/s) and all angles (DOF ranges, glenoid rim and axis, the GH
  lines of action) are dimensionless and unchanged;
- segment masses x s_m, inertias x s_m s_L^2;
- Fmax x s_F by the strength rule (:data:`STRENGTH_RULES`), with the passive and tendon force through the
  existing Fmax factor (``sim.das3.model``: kSEE and kPEE are per Fmax); the passive structures scale as the
  muscles do (*proposal*: keeps the passive behaviour in proportion to the strength): ligament and contact stiffness
  x s_F / s_L (force x s_F at the same strain), the passive joint moments (K1, K2, B) and Engin's moments x s_F s_L;
  the 10 N/m linear muscle terms and gravity stay absolute.

Geometric similarity (lengths ~ s, cross-sections ~ s^2) gives Fmax ~ s_L^2 and maximum moments ~ s_L^3;
measured strength follows it: force ~ m^0.67 ~ H^2 (Jaric 2002, Sports Med 32:615-631; Markovic & Jaric 2004,
Eur J Appl Physiol 92:139-149).

The reference subject (scale 1) is the DAS3 release itself, a single cadaver data set (Klein Breteler et al.
1999, J Biomech 32:1191-1197; Chadwick et al. 2014: "not scaled in any way"), for which no height or body mass
is published. ``height_m`` and ``body_mass_kg`` are therefore converted against an **assumed** reference:
de Leva's (1996, Table 4) male mean, 1741 mm and 73.0 kg.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

from sim.config_schema import Key, Section
from sim.das3.engin import CM, MPSI

REFERENCE_HEIGHT_M = 1.741
"""Stature of scale 1: an assumption, de Leva 1996 Table 4, male mean (the DAS3 cadaver's is not published)."""
REFERENCE_MASS_KG = 73.0
"""Body mass of scale 1: an assumption, de Leva 1996 Table 4, male mean."""
STRENGTH_RULES = ("geometric", "mass", "none")
"""How Fmax follows size: ``geometric`` x s_L^2 (geometric similarity), ``mass`` x s_m^(2/3) (Jaric 2002),
``none`` (unchanged: give the strength with the group strengths)."""
LENGTH_SCALE_RANGE = (0.5, 1.5)
"""Valid length scales (*proposal*: adult proportions, which uniform scaling keeps, end well inside it)."""
MASS_SCALE_RANGE = (0.25, 4.0)
"""Valid mass scales (*proposal*)."""

# The ranges of height_m and body_mass_kg below are a *proposal*: a sanity bound, like the scale ranges.
SIZE_SCHEMA = Section("patient.size", "The patient's size: the DAS3 arm scaled uniformly (lengths, masses, "
                      "inertias, muscle paths, Fmax by the strength rule). Give height_m or length_scale, and "
                      "body_mass_kg or mass_scale; one not given stays at the reference (docs: virtual patients).", (
    Key("height_m", "number", None, f"stature; length_scale = height_m / {REFERENCE_HEIGHT_M} (assumed reference: "
        "de Leva 1996, male mean)", lo=0.9, hi=2.5, unit="m"),
    Key("body_mass_kg", "number", None, f"body mass; mass_scale = body_mass_kg / {REFERENCE_MASS_KG:g} (assumed "
        "reference: de Leva 1996, male mean)", lo=20.0, hi=250.0, unit="kg"),
    Key("length_scale", "number", None, "factor on every length of the model", lo=LENGTH_SCALE_RANGE[0],
        hi=LENGTH_SCALE_RANGE[1]),
    Key("mass_scale", "number", None, "factor on every segment mass (inertias x mass_scale length_scale^2)",
        lo=MASS_SCALE_RANGE[0], hi=MASS_SCALE_RANGE[1]),
    Key("strength_rule", "string", "geometric", "Fmax x length_scale^2 (geometric), x mass_scale^(2/3) (mass) or "
        "unchanged (none)", choices=STRENGTH_RULES),
))


@dataclass(frozen=True)
class SubjectSize:
    """A patient's size: the scales and the rule, and the ``[patient.size]`` keys as given (recorded)."""

    length_scale: float = 1.0
    mass_scale: float = 1.0
    strength_rule: str = "geometric"
    given: tuple[tuple[str, object], ...] = ()

    @property
    def reference(self) -> bool:
        """Scale 1: the published model unchanged."""
        return self.length_scale == 1.0 and self.mass_scale == 1.0

    @property
    def force_scale(self) -> float:
        """The factor on Fmax of :attr:`strength_rule`."""
        return force_scale(self.strength_rule, self.length_scale, self.mass_scale)


def force_scale(rule: str, length_scale: float, mass_scale: float) -> float:
    """Fmax factor: s_L^2 (geometric), s_m^(2/3) (mass) or 1 (none)."""
    if rule == "geometric":
        return length_scale ** 2
    if rule == "mass":
        return mass_scale ** (2.0 / 3.0)
    if rule == "none":
        return 1.0
    raise ValueError(f"strength_rule must be one of {', '.join(STRENGTH_RULES)}, not {rule!r}")


def size_from_values(values: dict) -> tuple[SubjectSize | None, str | None]:
    """(the size, None) of a read ``[patient.size]`` table (file units), or (None, the key at fault) when it gives
    both a height and a length scale, or both a body mass and a mass scale."""
    for direct, scale in (("height_m", "length_scale"), ("body_mass_kg", "mass_scale")):
        if values.get(direct) is not None and values.get(scale) is not None:
            return None, scale
    length = values["height_m"] / REFERENCE_HEIGHT_M if values.get("height_m") is not None \
        else values.get("length_scale") or 1.0
    mass = values["body_mass_kg"] / REFERENCE_MASS_KG if values.get("body_mass_kg") is not None \
        else values.get("mass_scale") or 1.0
    given = tuple((k, values[k]) for k in SIZE_SCHEMA.by_name if values.get(k) is not None)
    return SubjectSize(float(length), float(mass), values["strength_rule"], given), None


def scaled_model_data(m: dict, length: float, mass: float, force: float) -> dict:
    """A copy of the release's model data (``das3_model.json`` as parsed) scaled: lengths x ``length``, masses x
    ``mass``, inertias x ``mass length^2``, Fmax x ``force``, ligament and contact stiffness x ``force /
    length``. The contact smoothing ``scap_thorax_eps`` is dimensionless (of the ellipsoid equation) and stays."""
    m = copy.deepcopy(m)
    for joint in m["joints"]:
        joint["location"] = _times(joint["location"], length)
    for seg in m["segments"]:
        seg["mass"] = seg["mass"] * mass
        seg["mass_center"] = _times(seg["mass_center"], length)
        seg["inertia"] = _times(seg["inertia"], mass * length ** 2)
    for mu in m["muscles"]:
        mu["fmax"] = mu["fmax"] * force
        mu["lceopt"] = mu["lceopt"] * length
        mu["lslack"] = mu["lslack"] * length
        mu["lcoefs"] = _times(mu["lcoefs"], length)
        mu["mass"] = mu["mass"] * force * length           # volume: cross-section x length (not used by the model)
    for key in ("conoid_origin", "conoid_insertion", "conoid_length", "conoid_eps", "TSprojection", "AIprojection",
                "thorax_radii", "thorax_center"):
        m[key] = _times(m[key], length)
    m["conoid_stiffness"] = m["conoid_stiffness"] * force / length
    m["scap_thorax_k"] = m["scap_thorax_k"] * force / length
    return m


def scaled_moments(values, moment_scale: float) -> np.ndarray:
    """Passive joint moment parameters (N m/rad, N m/rad^2, N m s/rad) x the moment scale s_F s_L."""
    return np.asarray(values, np.float64) * moment_scale


def scaled_engin(parameters: np.ndarray, moment_scale: float) -> np.ndarray:
    """Engin's parameter vector (``sim.das3.engin``) with its resistive and torsion moments x the moment scale."""
    p = np.array(parameters)
    p[CM:CM + 10] *= moment_scale
    p[MPSI:] *= moment_scale
    p.setflags(write=False)
    return p


def _times(value, factor: float):
    """A number or nested list of numbers times ``factor``, as the same nesting of floats."""
    return (np.asarray(value, np.float64) * factor).tolist()
