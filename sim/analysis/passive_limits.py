"""Limits on what the passive structures of the shoulder girdle may carry in an optimisation.

The DAS3 scapulothoracic contact and conoid ligament are penalty springs (Chadwick et al. 2014 §II-B5, eq. 5;
App. B, eqs. 17-21): their force grows without bound with penetration or stretch, so an optimiser that
maximises a moment may sink the scapula into the thorax and stretch the conoid as far as that helps. The
limits (their evidence: ``docs/analyses/max-moment.md``):

- contact depth: E(TS), E(AI) >= ``contact_e_min``. App. B sets the contact stiffness "large enough to
  prevent penetration"; the release's own passive equilibrium already sits at E = -0.023 (TS), so the
  default is that depth: no deeper than at rest. (The solution stays an equilibrium of the plant, which a
  hard contact with reaction forces would not be.)
- conoid: elongation from its length at the published equilibrium <= ``conoid_elongation_max_m``, the
  elongation to failure of the intact coracoclavicular complex, 7.7 mm (Harris et al. 2000, Am J Sports Med
  28:103, the curve the DAS3 conoid stiffness was fitted to, Chadwick ref. [12]). A force cap at a
  published failure load cannot be used: the release's rest posture already carries 938 N, above them.
  The length bound is applied as the equivalent force bound, eq. 5 being monotonic in length.
- girdle ranges: the DAS3 authors' maximum-moment script (isometric_strength_sim.m, D. Blana 2012, public
  DAS3 code), the hard bounds of the formulation behind Chadwick Figs. 4-8.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from sim.analysis.rest_model import RestModel, contact_function
from sim.das3.kernels.step import IA, evaluate, new_plant_work
from sim.das3.kinematics import conoid_attachments, landmarks, thorax_ellipsoid
from sim.das3.model import N_LOADS, N_STATES, Das3Model

AUTHORS_GIRDLE_RANGES_RAD = tuple((math.radians(lo), math.radians(hi)) for lo, hi in
                                  ((-65, -20), (5, 30), (0, 83), (33, 69), (-18, 7), (-17, 18)))
"""SCy, SCz, SCx, ACy, ACz, ACx ranges of isometric_strength_sim.m (Blana 2012), deg -> rad."""
HARRIS_2000_ELONGATION_TO_FAILURE_M = 7.7e-3
"""Intact coracoclavicular complex, elongation to failure 7.7 +- 1.9 mm (Harris et al. 2000, abstract)."""
REST_DEPTH = "rest"
"""``contact_e_min`` value meaning: the deeper of TS and AI at the published equilibrium."""


@dataclass(frozen=True)
class PassiveLimits:
    """``contact_e_min``: lower bound on E of TS and AI (< 0: inside), ``REST_DEPTH`` or None (no bound);
    ``conoid_elongation_max_m``: elongation from the rest length, or None; ``girdle_ranges_rad``: (6, 2)
    rows SCy..ACx, or None for the model's DOF ranges."""

    contact_e_min: float | str | None = REST_DEPTH
    conoid_elongation_max_m: float | None = HARRIS_2000_ELONGATION_TO_FAILURE_M
    girdle_ranges_rad: tuple[tuple[float, float], ...] | None = AUTHORS_GIRDLE_RANGES_RAD

    def __post_init__(self) -> None:
        e = self.contact_e_min
        if e not in (None, REST_DEPTH) and not (isinstance(e, float | int) and math.isfinite(e) and -1 < e <= 0):
            raise ValueError(f"contact_e_min must be in (-1, 0], {REST_DEPTH!r} or None, not {e!r}")
        d = self.conoid_elongation_max_m
        if d is not None and not (math.isfinite(d) and d >= 0.0):
            raise ValueError(f"conoid_elongation_max_m must be a finite length >= 0 m or None, not {d}")
        if self.girdle_ranges_rad is not None:
            r = np.asarray(self.girdle_ranges_rad, float)
            if r.shape != (6, 2) or not np.all(np.isfinite(r)) or np.any(r[:, 0] >= r[:, 1]):
                raise ValueError("girdle_ranges_rad must be six finite (low, high) pairs with low < high")


MAXIMAL_EFFORT = PassiveLimits()
"""Maximum moments: contact depth, conoid elongation and the authors' girdle ranges (module docstring)."""
MINIMAL_EFFORT = PassiveLimits(contact_e_min=None, conoid_elongation_max_m=None)
"""Static optimisation: the authors' girdle ranges only. Van der Helm (1994) held TS and AI on the thorax
with compression-only forces and a rigid conoid, neither limited in force; a minimum-effort solution does
not seek large passive loads, while a maximum-moment one exploits every newton the penalty springs give."""
UNLIMITED = PassiveLimits(contact_e_min=None, conoid_elongation_max_m=None, girdle_ranges_rad=None)
"""No limit but E <= 0 and the model file's ranges (the formulation before issue 36)."""


def dof_ranges(model: Das3Model, limits: PassiveLimits) -> np.ndarray:
    """(11, 2) rad: the model's DOF ranges with the girdle rows replaced by the limits' ranges."""
    ranges = np.array(model.dof_ranges, float)
    if limits.girdle_ranges_rad is not None:
        ranges[:6] = np.asarray(limits.girdle_ranges_rad, float)
    return ranges


@dataclass(frozen=True)
class RestReference:
    """The published equilibrium's contact E (TS, AI) and conoid length (m)."""

    contact_e: np.ndarray
    conoid_length_m: float


def rest_reference(model: Das3Model) -> RestReference:
    W = new_plant_work(model.arrays)
    x = np.array(model.equilibrium_state)
    evaluate(model.arrays, x, np.zeros(N_STATES), x[IA:], np.zeros(N_LOADS), W)
    length = float(np.linalg.norm(W.mb.conoid_PI[:, 0] - W.mb.conoid_PO[:, 0]))
    return RestReference(contact_function(model.arrays, W), length)


@dataclass(frozen=True)
class PassiveLoadHistory:
    """Per posture of a run: E of TS and AI (n, 2; < 0 inside the thorax) and the conoid's elongation from its
    length at the published equilibrium (n,), m; with the maximum-moment limits (:data:`MAXIMAL_EFFORT`) to
    compare them with: the rest depth and the elongation to failure."""

    contact_e: np.ndarray
    conoid_elongation_m: np.ndarray
    contact_e_min: float
    conoid_elongation_max_m: float


def passive_load_history(model: Das3Model, q: np.ndarray) -> PassiveLoadHistory:
    """E = sum(((P - c) / a)^2) - 1 at TS and AI (spec "Scapulothoracic contact") and |P_I - P_O| - L_rest of the
    conoid for postures ``q`` (n, 11), from the kinematics alone (:mod:`sim.das3.kinematics`)."""
    centre, axes = thorax_ellipsoid(model.arrays)
    points = landmarks(model.arrays, q)[:, 2:4]               # TS, AI
    contact_e = np.sum(((points - centre) / axes) ** 2, axis=2) - 1.0
    origin, insertion = conoid_attachments(model.arrays, q)
    elongation = np.linalg.norm(insertion - origin, axis=1) - rest_reference(model).conoid_length_m
    return PassiveLoadHistory(contact_e, elongation, float(contact_bound(model, MAXIMAL_EFFORT)),
                              conoid_elongation_max(model, MAXIMAL_EFFORT))


def contact_bound(model: Das3Model, limits: PassiveLimits) -> float | None:
    """The E lower bound in numbers (None: off)."""
    if limits.contact_e_min == REST_DEPTH:
        return float(np.min(rest_reference(model).contact_e))
    return limits.contact_e_min


def conoid_elongation_max(model: Das3Model, limits: PassiveLimits) -> float:
    """The conoid's allowed elongation, m: the limit's (a reference-size ligament's) x the model's length scale (a
    scaled subject's ligament fails at the same strain, ``sim.subject_size``)."""
    elongation = float(limits.conoid_elongation_max_m)
    return elongation if not model.config.sized else elongation * model.config.length_scale


def conoid_force_cap(model: Das3Model, limits: PassiveLimits) -> float | None:
    """Force of eq. 5 at the rest length plus the allowed elongation (None: off):
    F = k/2 (d + sqrt(d^2 + eps^2)), d = L_rest + dL_max - L_slack."""
    if limits.conoid_elongation_max_m is None:
        return None
    slack, stiffness, eps = (float(v) for v in model.arrays.conoid[6:9])
    d = rest_reference(model).conoid_length_m + conoid_elongation_max(model, limits) - slack
    return 0.5 * stiffness * (d + math.sqrt(d * d + eps * eps))


def limit_constraints(rest: RestModel, limits: PassiveLimits) -> list[dict]:
    """Inequality rows (scipy form, >= 0) for the contact depth and the conoid, with the girdle free."""
    n, cons = rest.layout.size, []
    if not rest.layout.n_q:
        return cons
    e_min = contact_bound(rest.model, limits)
    if e_min is not None:
        cons.append({"type": "ineq", "fun": lambda z: rest.at(z[:n]).contact_e - e_min,
                     "jac": lambda z: pad_columns(rest.output_jacobians(z[:n]).contact_e, z.size)})
    cap = conoid_force_cap(rest.model, limits)
    if cap is not None:
        cons.append({"type": "ineq", "fun": lambda z: np.array([cap - rest.at(z[:n]).conoid_force_n]),
                     "jac": lambda z: pad_columns(-rest.output_jacobians(z[:n]).conoid_force[None, :], z.size)})
    return cons


def active_limits(rest: RestModel, z: np.ndarray, limits: PassiveLimits, tol: float = 1e-6) -> list[str]:
    """Names of the limits at their bound at z (relative ``tol``)."""
    r, active = rest.at(z[:rest.layout.size]), []
    e_min = contact_bound(rest.model, limits)
    if e_min is not None:
        active += [f"contact_depth:{p}" for p, e in zip(("TS", "AI"), r.contact_e) if e <= e_min + tol]
    cap = conoid_force_cap(rest.model, limits)
    if cap is not None and r.conoid_force_n >= cap * (1 - tol):
        active.append("conoid_elongation")
    return active


def pad_columns(J: np.ndarray, n: int) -> np.ndarray:
    """J with zero columns appended up to n (for the extra variables after the layout)."""
    if J.shape[-1] == n:
        return J
    out = np.zeros(J.shape[:-1] + (n,))
    out[..., :J.shape[-1]] = J
    return out
