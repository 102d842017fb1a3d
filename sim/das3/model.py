"""Immutable DAS3 model parameters (the ``Model`` half of the Model/Data split).

:func:`load_model` reads the published DAS3 release-2 parameter set shipped in ``sim/data`` (see
``sim/data/README.md`` for provenance) and packs everything the numba kernels need into read-only numpy
arrays (:class:`ModelArrays`). Equations and constants follow ``das3-model.md`` (the project's plant spec)
and Chadwick et al. 2014, Appendix A/B.
"""
from __future__ import annotations

import functools
from dataclasses import replace

import numpy as np

from sim.das3.config import ModelConfig
from sim.das3.engin import engin_parameters
from sim.das3.equilibrium import contraction_states, solve_equilibrium
from sim.das3.kernels.polynomials import MonomialTable, full_exponents, polynomial_arrays, readonly
from sim.das3.kernels.step import new_plant_work
from sim.das3.layout import (
    BODY_FRAMES,
    BODY_SEGMENTS,
    CLAVICLE_FRAME,
    DOF_NAMES,
    ECC_FORCE_MAX,
    FL_WIDTH,
    GLENOID_X,
    HILL_A,
    HUMERUS_FRAME,
    LINEAR_STIFFNESS,
    LOAD_NAMES,
    MUS_C1,
    MUS_C1_FALL,
    MUS_C2,
    MUS_C2_FALL,
    MUS_EXCITATION_GATE,
    MUS_FMAX,
    MUS_K1PEE,
    MUS_K1SEE,
    MUS_KIND,
    MUS_KPEE,
    MUS_KSEE,
    MUS_LCEOPT,
    MUS_PEESLACK,
    MUS_PENN_B,
    MUS_REFLEX_DELAY,
    MUS_REFLEX_GAIN,
    MUS_REFLEX_THRESHOLD,
    MUS_SEESLACK,
    MUS_VMAX,
    MUSCLE_DAS3,
    MUSCLE_THELEN2003,
    N_DOF,
    N_FRAMES,
    N_LOADS,
    N_MUS,
    N_MUS_COLUMNS,
    N_STATES,
    PEE_REL_FORCE,
    RADIUS_FRAME,
    SCAPULA_FRAME,
    SDOT_DAMPING,
    SEE_STRAIN_AT_FMAX,
    THELEN_TAU_ACT,
    THELEN_TAU_DEACT,
    ULNA_FRAME,
    Das3Model,
    ModelArrays,
)
from sim.das3.muscle_groups import element_indices, unknown_muscle
from sim.das3.release import joint_location, muscle_element_names, read_model_data
from sim.subject_size import scaled_engin, scaled_model_data, scaled_moments

__all__ = [  # the layout's names (sim.das3.layout) are this module's public names too
    "BODY_FRAMES", "BODY_SEGMENTS", "CLAVICLE_FRAME", "DOF_NAMES", "Das3Model", "ECC_FORCE_MAX", "FL_WIDTH",
    "GLENOID_X", "HILL_A", "HUMERUS_FRAME", "LINEAR_STIFFNESS", "LOAD_NAMES", "MUSCLE_DAS3", "MUSCLE_THELEN2003",
    "MUS_C1", "MUS_C1_FALL", "MUS_C2", "MUS_C2_FALL", "MUS_EXCITATION_GATE", "MUS_FMAX", "MUS_K1PEE", "MUS_K1SEE",
    "MUS_KIND", "MUS_KPEE", "MUS_KSEE", "MUS_LCEOPT", "MUS_PEESLACK", "MUS_PENN_B", "MUS_REFLEX_DELAY",
    "MUS_REFLEX_GAIN", "MUS_REFLEX_THRESHOLD", "MUS_SEESLACK", "MUS_VMAX",
    "ModelArrays", "N_DOF", "N_FRAMES", "N_LOADS", "N_MUS", "N_MUS_COLUMNS", "N_STATES", "PEE_REL_FORCE",
    "RADIUS_FRAME", "SCAPULA_FRAME", "SDOT_DAMPING", "SEE_STRAIN_AT_FMAX", "THELEN_TAU_ACT", "THELEN_TAU_DEACT",
    "ULNA_FRAME", "element_values", "excitation_gate", "fmax_scale", "joint_location", "load_model", "muscle_element_names",
    "pee_slack_shift", "reflex_parameters",
]


def _unit(v) -> np.ndarray:
    v = np.asarray(v, np.float64)
    return v / np.linalg.norm(v)


def _joints(m: dict) -> tuple[tuple[str, ...], np.ndarray, np.ndarray, np.ndarray]:
    """DOF names (checked against DOF_NAMES) and ranges, and each DOF's joint centre and unit axis."""
    dof_names = tuple(d["name"] for d in m["dofs"])
    if dof_names != DOF_NAMES:
        raise ValueError(f"unexpected DOF order in model data: {dof_names}")
    ranges = np.array([d["range"] for d in m["dofs"]], np.float64)
    joints = {j["name"]: j for j in m["joints"]}
    # (joint name, axis key) for each DOF, in DOF order (spec "Kinematics").
    dof_axes = [("sc1", "r1_axis"), ("sc2", "r2_axis"), ("sc3", "r3_axis"),
                ("ac1", "r1_axis"), ("ac2", "r2_axis"), ("ac3", "r3_axis"),
                ("gh1", "r2_axis"), ("gh2", "r3_axis"), ("gh3", "r2_axis"),
                ("hu", "r1_axis"), ("ur", "r1_axis")]
    joint_loc = np.array([joints[j]["location"] for j, _ in dof_axes], np.float64)
    joint_axis = np.array([_unit(joints[j][ax]) for j, ax in dof_axes])
    return dof_names, ranges, joint_loc, joint_axis


def _bodies(m: dict, config: ModelConfig) -> tuple[list, list, list, list]:
    """Mass, centre of mass (the hand's in the radius frame), inertia and gravity weight of each body."""
    joints = {j["name"]: j for j in m["joints"]}
    segs = {s["name"]: s for s in m["segments"]}
    body_mass, body_com, body_inertia, body_weight = [], [], [], []
    for name in BODY_SEGMENTS:
        s = segs[name]
        body_mass.append(s["mass"])
        com = np.array(s["mass_center"], np.float64)
        if name == "handr":
            com = com + np.array(joints["rc"]["location"], np.float64)
        body_com.append(com)
        body_inertia.append(s["inertia"])
        body_weight.append(1.0 if (name != "handr" or config.hand_weight) else 0.0)
    return body_mass, body_com, body_inertia, body_weight


def _muscle_constants(muscles: list, table: MonomialTable, muscle_model: str = "das3", fmax_scale=None, gate=None,
                      reflex=None):
    """Per-muscle constants (MUS_* columns), DOFs crossed and path-length terms; adds their monomials.
    ``fmax_scale``: a factor on each element's Fmax (:attr:`ModelConfig.strength`); ``gate``: each element's
    excitation gate (:attr:`ModelConfig.denervated`), 1 when None; ``reflex``: (138, 3) stretch-reflex gain,
    threshold and delay (:attr:`ModelConfig.spasticity`), none when None."""
    if len(muscles) != N_MUS:
        raise ValueError(f"expected {N_MUS} muscles, found {len(muscles)}")
    mus = np.zeros((N_MUS, N_MUS_COLUMNS))
    mus_ndof = np.zeros(N_MUS, np.int64)
    mus_dofs = -np.ones((N_MUS, 9), np.int64)
    terms = []  # per muscle: list of (coef, full exponent tuple)
    for i, mu in enumerate(muscles):
        fmax, lceopt, slack = float(mu["fmax"]), float(mu["lceopt"]), float(mu["lslack"])
        fmax *= 1.0 if fmax_scale is None else fmax_scale[i]
        c2 = 1.0 / mu["tdeact"]
        c1 = 1.0 / mu["tact"] - c2
        mus[i, :MUS_C1_FALL] = (fmax, lceopt, slack, mu["PEEslack"], np.sin(mu["pennopt"]), mu["vmax"], c1, c2,
                                1.0 / (SEE_STRAIN_AT_FMAX * slack) ** 2,       # kSEE (1/m^2)
                                PEE_REL_FORCE / FL_WIDTH ** 2,                 # kPEE
                                LINEAR_STIFFNESS * lceopt / fmax,              # k1 of PEE, normalised
                                LINEAR_STIFFNESS / fmax)                       # k1 of SEE, 1/m
        mus[i, MUS_C1_FALL:MUS_REFLEX_GAIN] = (c1, c2, MUSCLE_DAS3, 1.0 if gate is None else gate[i])
        mus[i, MUS_REFLEX_GAIN:] = 0.0 if reflex is None else reflex[i]
        if muscle_model == "thelen2003":     # da/dt = (u - a)/tau_act or (u - a)/tau_deact
            mus[i, [MUS_C1, MUS_C2, MUS_C1_FALL, MUS_C2_FALL, MUS_KIND]] = (
                0.0, 1.0 / THELEN_TAU_ACT, 0.0, 1.0 / THELEN_TAU_DEACT, MUSCLE_THELEN2003)
        dofs = [int(d) for d in mu["dof_indices"]]
        first = dofs[0] if dofs else 0
        if dofs != list(range(first, first + len(dofs))):
            raise ValueError(f"muscle {mu['name']}: DOFs {dofs} are not one contiguous range of the chain "
                             "(the kernels index a muscle's DOFs as first + k)")
        mus_ndof[i] = len(dofs)
        mus_dofs[i, : len(dofs)] = dofs
        coefs = mu["lcoefs"]
        rows = np.asarray(mu["lparams"], np.int64).reshape(len(coefs), len(dofs))
        terms.append([(float(c), full_exponents(r, dofs, N_DOF)) for c, r in zip(coefs, rows)])
        for _, e in terms[-1]:
            table.add(e)
    return mus, mus_ndof, mus_dofs, terms


def _loa_fits(loa: dict, names: tuple[str, ...], crosses: np.ndarray, table: MonomialTable):
    """Muscle index, DOFs and x, y, z polynomial terms of each GH line-of-action fit, the fits over the same
    DOFs next to each other (each such group is one dense block, ``sim.das3.kernels.polynomials``); adds their monomials."""
    first: dict[tuple[int, ...], int] = {}
    for fit in loa["muscles"]:
        first.setdefault(tuple(fit["dof_indices"]), len(first))
    fits = sorted(loa["muscles"], key=lambda f: first[tuple(f["dof_indices"])])
    gh_muscle, fit_dofs, loa_rows = [], [], []
    for fit in fits:
        gh_muscle.append(names.index(fit["name"]))
        fit_dofs.append(tuple(fit["dof_indices"]))
        for comp in "xyz":
            row = [(float(c), full_exponents(r, fit["dof_indices"], N_DOF))
                   for c, r in zip(fit[comp]["coefs"], fit[comp]["exponents"])]
            for _, e in row:
                table.add(e)
            loa_rows.append(row)
    if sorted(gh_muscle) != list(np.flatnonzero(crosses)):
        raise ValueError("GH line-of-action fits do not match the muscles that cross GH")
    return gh_muscle, fit_dofs, loa_rows


def _glenoid_axes() -> list[np.ndarray]:
    """The glenoid frame's x, y, z axes in the scapula frame (x along GLENOID_X, y in the x-y plane)."""
    xg = _unit(GLENOID_X)
    yg = _unit(np.array([0.0, 1.0, 0.0]) - xg[1] * xg)
    return [xg, yg, np.cross(xg, yg)]


def load_model(config: ModelConfig | None = None) -> Das3Model:
    """The immutable model of a :class:`ModelConfig`, built once per process and configuration (a sweep's
    runs on one worker share it; its arrays are read-only)."""
    return _build_model(config or ModelConfig())


@functools.lru_cache(maxsize=8)
def _build_model(config: ModelConfig) -> Das3Model:
    """Build the model from the shipped data files and ``config``."""
    m, eq, loa, digest = read_model_data()
    sized = config.sized                             # scale 1 takes none of the size path: bit-identical
    if sized:
        m = scaled_model_data(m, config.length_scale, config.mass_scale, config.force_scale)
    dof_names, ranges, joint_loc, joint_axis = _joints(m)
    body_mass, body_com, body_inertia, body_weight = _bodies(m, config)
    muscles = m["muscles"]
    table = MonomialTable()
    names = tuple(mu["name"] for mu in muscles)
    mus, mus_ndof, mus_dofs, terms = _muscle_constants(muscles, table, config.muscle_model,
                                                       fmax_scale(config.strength, names),
                                                       excitation_gate(config.denervated, names),
                                                       reflex_parameters(config.spasticity, names))
    mus[:, MUS_PEESLACK] -= pee_slack_shift(config.contracture, names)        # a contracted passive element
    crosses = np.array([bool(mu["crossesGH"]) for mu in muscles])
    gh_muscle, loa_dofs, loa_rows = _loa_fits(loa, names, crosses, table)
    arrays = ModelArrays(
        joint_loc=readonly(joint_loc), joint_axis=readonly(joint_axis),
        body_frame=readonly(BODY_FRAMES, np.int64), body_mass=readonly(body_mass), body_com=readonly(body_com),
        body_inertia=readonly(body_inertia), body_weight=readonly(body_weight), gravity=readonly(m["gravity"]),
        conoid=readonly([*m["conoid_origin"], *m["conoid_insertion"], m["conoid_length"],
                    m["conoid_stiffness"], m["conoid_eps"]]),
        contact_points=readonly([m["TSprojection"], m["AIprojection"]]),
        contact=readonly([*m["thorax_center"], *m["thorax_radii"], m["scap_thorax_k"], m["scap_thorax_eps"]]),
        hand_com_radius=readonly(body_com[-1]),
        joint_lo=readonly(ranges[:, 0]), joint_hi=readonly(ranges[:, 1]), joint_mid=readonly(ranges.mean(axis=1)),
        joint_k=readonly(_passive_moments([config.joint_k1, config.joint_k2, config.joint_damping], config, sized)),
        mus=readonly(mus), mus_ndof=readonly(mus_ndof, np.int64), mus_dofs=readonly(mus_dofs, np.int64),
        gh_muscle=readonly(gh_muscle, np.int64), glenoid=readonly(_glenoid_axes()),
        gh_rim=readonly([config.gh_rim_theta, config.gh_rim_phi]),
        engin=_passive_moments(engin_parameters(config.shoulder_passive == "das3+engin", joint_loc[9], joint_axis[9]),
                               config, sized),
        **polynomial_arrays(muscles, terms, loa_dofs, loa_rows, table, N_DOF),
    )
    x_eq = np.asarray(eq["x"], np.float64)
    if x_eq.shape != (N_STATES,):
        raise ValueError("equilibrium state must have 298 values")
    model = Das3Model(
        config=config, arrays=arrays, dof_names=dof_names, dof_ranges=readonly(ranges),
        muscle_names=names, muscle_dof_indices=tuple(tuple(mu["dof_indices"]) for mu in muscles),
        crosses_gh=readonly(crosses, np.bool_), equilibrium_state=readonly(x_eq), data_sha256=digest,
    )
    if config.muscle_model != "das3":
        model = replace(model, equilibrium_state=readonly(_fibres_at_rest(model, x_eq)))
    if config.shoulder_passive != "das3" or config.strength or config.contracture or sized:
        model = replace(model, equilibrium_state=readonly(_posture_at_rest(model)))
    return model


def _passive_moments(values, config: ModelConfig, sized: bool):
    """The passive joint moments' parameters (K1, K2, B, or Engin's vector) of a scaled subject x s_F s_L
    (``sim.subject_size``); ``values`` unchanged at scale 1."""
    if not sized:
        return values
    moment_scale = config.force_scale * config.length_scale
    return scaled_moments(values, moment_scale) if isinstance(values, list) else scaled_engin(values, moment_scale)


def element_values(pairs, names: tuple[str, ...], default: float, width: int = 0) -> np.ndarray:
    """Per-element values from (element or group, value...) pairs, ``default`` where unnamed; a later pair over an
    earlier one. ``width`` 0: one value per element, (n,); else ``width`` values, (n, width)."""
    values = np.full((len(names), width) if width else len(names), default, float)
    for key, *value in pairs:
        members = element_indices(key, names)
        if members is None:             # (indexing with None would set every element)
            raise ValueError(unknown_muscle(key, names))
        values[members] = value if width else value[0]
    return values


def fmax_scale(strength: tuple[tuple[str, float], ...], names: tuple[str, ...]) -> np.ndarray:
    """The factor on each element's Fmax from (element or group, factor) pairs; 1 where unnamed."""
    return element_values(strength, names, 1.0)


def pee_slack_shift(contracture: tuple, names: tuple[str, ...]) -> np.ndarray:
    """Each element's shortening of its passive slack length (Lceopt) from (name, shift) pairs; 0 where unnamed."""
    return element_values(contracture, names, 0.0)


def reflex_parameters(spasticity: tuple, names: tuple[str, ...]) -> np.ndarray:
    """(138, 3) [gain, threshold, delay] of each element's stretch reflex (0: none) from (name, gain, threshold,
    delay) tuples."""
    return element_values(spasticity, names, 0.0, width=3)


def excitation_gate(denervated: tuple[str, ...], names: tuple[str, ...]) -> np.ndarray:
    """Each element's excitation gate: 0 on the elements of the denervated elements or groups, else 1."""
    return element_values(((key, 0.0) for key in denervated), names, 1.0)


def _posture_at_rest(model: Das3Model) -> np.ndarray:
    """The variant's own passive equilibrium from the published one: Engin's moments, or muscles of changed
    strength, turn the arm at the published rest posture, so a run from it would start by settling."""
    return solve_equilibrium(model).x


def _fibres_at_rest(model: Das3Model, x: np.ndarray) -> np.ndarray:
    """x with every muscle's s re-solved (g = 0, sdot = 0) at its joint angles and activation: the
    published equilibrium's fibre state belongs to the DAS3 muscle."""
    x = np.array(x)
    x[N_DOF:2 * N_DOF] = 0.0
    contraction_states(model.arrays, new_plant_work(model.arrays), x, np.zeros(N_STATES), x[2 * N_DOF + N_MUS:],
                       np.zeros(N_LOADS))
    return x
