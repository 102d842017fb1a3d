"""The DAS3 model's fixed layout: its sizes, names and index constants, and the types of its parameters
(:class:`ModelArrays`, :class:`Das3Model`). The kernels, the plant and the equilibrium solver import these from
here, so :mod:`sim.das3.model` (which builds a model and solves its variants' rest postures) can import them all
at module top.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import numpy as np

from sim.das3.config import ModelConfig
from sim.das3.muscle_groups import group_of

N_DOF = 11
N_MUS = 138
N_STATES = 2 * N_DOF + 2 * N_MUS  # 298
FIBRE_MIN = 0.05
"""s = Lce cos(p) / Lceopt below which the model is outside its validity (the Hill model is singular at zero fibre
length; :data:`sim.das3.kernels.step.STEP_FIBRE_COLLAPSE`)."""
ACTIVATION_ROUNDOFF = 1e-9
"""How far outside [0, 1] a state file's activation may be (round-off of the solver that wrote it)."""
N_LOADS = 10  # 5 moments, arm support (distance, force), hand force (3)
N_FRAMES = N_DOF + 1  # frame 0 = thorax (ground), frame j+1 = after DOF j

DOF_NAMES = ("SCy", "SCz", "SCx", "ACy", "ACz", "ACx", "GHy", "GHz", "GHyy", "ELx", "PSy")
GIRDLE_NAMES = DOF_NAMES[:6]  # clavicle (SC) and scapula (AC) angles, the first six DOFs
LOAD_NAMES = ("M_th_y", "M_th_z", "M_hum_y", "M_elbow", "M_pronation",
              "armsupport_distance", "armsupport_force", "hand_force_x", "hand_force_y", "hand_force_z")

# Muscle constants hard-coded in the release (spec "Muscle contraction").
FL_WIDTH = 0.56          # W, force-length width
SEE_STRAIN_AT_FMAX = 0.04  # umax
PEE_REL_FORCE = 1.0      # krel, PEE force / Fmax at elongation W
HILL_A = 0.25
ECC_FORCE_MAX = 1.5      # gmax
LINEAR_STIFFNESS = 10.0  # N/m, the small k1 term of PEE and SEE
SDOT_DAMPING = 0.001     # F5 = 0.001 * sdot

# Glenoid x axis in the scapula frame (spec "Outputs"): humeral-head centre -> glenoid centre.
GLENOID_X = (-0.98162, 0.11772, 0.15020)

# Bodies with mass, the frame they are fixed to (index into frames) and their segment names.
BODY_SEGMENTS = ("clavicler", "scapular", "humerusr", "ulnar", "radiusr", "handr")
BODY_FRAMES = (3, 6, 9, 10, 11, 11)
HUMERUS_FRAME = 9
SCAPULA_FRAME = 6
CLAVICLE_FRAME = 3
ULNA_FRAME = 10
RADIUS_FRAME = 11


class ModelArrays(NamedTuple):
    """Every parameter the kernels read, as contiguous read-only arrays (numba-friendly)."""

    joint_loc: np.ndarray      # (11, 3) joint centre in the parent frame, m
    joint_axis: np.ndarray     # (11, 3) unit rotation axis in the parent frame
    body_frame: np.ndarray     # (6,) int
    body_mass: np.ndarray      # (6,) kg
    body_com: np.ndarray       # (6, 3) centre of mass in the body's frame, m
    body_inertia: np.ndarray   # (6, 3, 3) inertia about the COM, body frame, kg m^2
    body_weight: np.ndarray    # (6,) 1.0 if gravity acts on the body, else 0.0
    gravity: np.ndarray        # (3,) m/s^2, thorax frame
    conoid: np.ndarray         # (9,) origin(3, clavicle), insertion(3, scapula), length, stiffness, eps
    contact_points: np.ndarray  # (2, 3) TS, AI in the scapula frame
    contact: np.ndarray        # (8,) centre(3), radii(3), stiffness, eps
    hand_com_radius: np.ndarray  # (3,) hand COM in the radius frame (rc.location + hand COM)
    joint_lo: np.ndarray       # (11,) rad
    joint_hi: np.ndarray
    joint_mid: np.ndarray
    joint_k: np.ndarray        # (3,) K1 [Nm/rad], K2 [Nm/rad^2], B [Nms/rad]
    mus: np.ndarray            # (138, N_MUS_COLUMNS) per-muscle constants, see MUS_* indices
    mus_ndof: np.ndarray       # (138,) int, number of DOFs crossed
    mus_dofs: np.ndarray       # (138, 9) int, DOFs crossed: one contiguous range, mus_dofs[i, 0] + k (padded with -1)
    mono_parent: np.ndarray    # (NM,) int: monomial m = monomial[mono_parent[m]] * q[mono_dof[m]]
    mono_dof: np.ndarray       # (NM,) int (entry 0 is the constant 1)
    len_target: np.ndarray     # (NL,) int: muscle i of each chunk of L_i(q) = sum coef * monomial
    len_coef: np.ndarray       # (NL, POLY_CHUNK) the chunk's coefficients (the last chunk of a row zero-padded)
    len_mono: np.ndarray       # (NL, POLY_CHUNK) int: the chunk's monomials
    grad_target: np.ndarray    # (NG,) int: chunks of dL_i/dq_(local k) go to row 9 i + k
    grad_coef: np.ndarray
    grad_mono: np.ndarray
    hess_muscle: np.ndarray    # (NH,) int: chunks of d2 L_i / dq_a dq_b belong to muscle i ...
    hess_entry: np.ndarray     # (NH,) int: ... and to entry a * 11 + b (a <= b)
    hess_coef: np.ndarray
    hess_mono: np.ndarray
    gh_muscle: np.ndarray      # (67,) int, muscle index of each GH line-of-action fit
    loa_group_cols: np.ndarray  # (G+1,) int: column range of each dense group in loa_dense_mono
    loa_group_rows: np.ndarray  # (G+1,) int: range of rows 3 k + c of each dense group (its fits are adjacent)
    loa_group_coef: np.ndarray  # (G+1,) int: range of each dense group's block in loa_dense_coef
    loa_dense_mono: np.ndarray  # (NC,) uint32: monomial of each dense column
    loa_dense_coef: np.ndarray  # flat column-major (monomial, row) coefficient blocks of the dense groups
    glenoid: np.ndarray        # (3, 3) rows x_g, y_g, z_g in the scapula frame
    gh_rim: np.ndarray         # (2,) theta_a, phi_a, rad
    engin: np.ndarray          # (sim.das3.engin.N_PARAMETERS,) Engin's passive shoulder moments; [0] = 1.0 when on


# Column indices of ModelArrays.mus. Activation: da/dt = (u - a)(c1 u + c2) with (MUS_C1, MUS_C2) while
# u >= a and (MUS_C1_FALL, MUS_C2_FALL) while u < a; MUS_KIND selects the contraction model; the plant
# applies g * clip(u, 0, 1) with g = MUS_EXCITATION_GATE (1, or 0 on a denervated element); a spastic element
# (MUS_REFLEX_GAIN > 0) adds its stretch reflex (sim.das3.kernels.reflex: gain per Lceopt/s, threshold in
# Lceopt/s, delay in s).
(MUS_FMAX, MUS_LCEOPT, MUS_SEESLACK, MUS_PEESLACK, MUS_PENN_B, MUS_VMAX, MUS_C1, MUS_C2,
 MUS_KSEE, MUS_KPEE, MUS_K1PEE, MUS_K1SEE, MUS_C1_FALL, MUS_C2_FALL, MUS_KIND, MUS_EXCITATION_GATE,
 MUS_REFLEX_GAIN, MUS_REFLEX_THRESHOLD, MUS_REFLEX_DELAY) = range(19)
N_MUS_COLUMNS = 19
MUSCLE_DAS3, MUSCLE_THELEN2003 = 0, 1
THELEN_TAU_ACT, THELEN_TAU_DEACT = 0.010, 0.040   # s (John, "Complete Description ...", activation dynamics)


@dataclass(frozen=True)
class Das3Model:
    """The DAS3 model: names and ranges for people, :attr:`arrays` for the kernels. Immutable."""

    kind: ClassVar[str] = "das3"                 # the registered plant type it drives (hil.rt.plants)
    load_names: ClassVar[tuple[str, ...]] = LOAD_NAMES
    has_glenohumeral: ClassVar[bool] = True      # GH force and stability are modelled

    config: ModelConfig
    arrays: ModelArrays
    dof_names: tuple[str, ...]
    dof_ranges: np.ndarray
    muscle_names: tuple[str, ...]
    muscle_dof_indices: tuple[tuple[int, ...], ...]
    crosses_gh: np.ndarray
    equilibrium_state: np.ndarray
    data_sha256: str

    n_dof: int = N_DOF
    n_muscles: int = N_MUS
    n_states: int = N_STATES

    @property
    def segment_model(self) -> "Das3Model":
        """The DAS3 model of the arm's segments (their kinematics, :mod:`sim.das3.kinematics`): this one."""
        return self

    def state_problem(self, x: np.ndarray) -> str | None:
        """Why ``x`` (N_STATES finite values, state order q, qdot, s, a) is no state of this model, or None: every
        angle within +-pi rad (+-180 deg), every fibre state s at least :data:`FIBRE_MIN`, every activation in [0, 1]
        (the activation dynamics, paper eq. 1, keep it there for excitations in [0, 1]) up to the round-off
        :data:`ACTIVATION_ROUNDOFF` of a solver's rest state (the published equilibrium has a = -3e-19)."""
        q, s, a = x[:N_DOF], x[2 * N_DOF:2 * N_DOF + N_MUS], x[2 * N_DOF + N_MUS:]
        checks = ((np.abs(q) > np.pi, self.dof_names, "angle {} is {:.4g} rad, beyond +-pi (+-180 deg)", q),
                  (s < FIBRE_MIN, self.muscle_names, f"fibre state s of {{}} is {{:.4g}}, below {FIBRE_MIN} "
                   "(the model's validity)", s),
                  ((a < -ACTIVATION_ROUNDOFF) | (a > 1.0 + ACTIVATION_ROUNDOFF), self.muscle_names,
                   "activation of {} is {:.4g}, outside [0, 1]", a))
        for bad, names, text, values in checks:
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                return text.format(names[i], values[i])
        return None

    def voluntary_reach(self, patient) -> np.ndarray:
        """(n_muscles,) how much of each element the patient's own drive reaches: 1 where its group is voluntary
        (``patient``: a :class:`sim.patient.Patient`), else 0."""
        return np.array([1.0 if patient.state_of(group_of(name)).state == "voluntary" else 0.0
                         for name in self.muscle_names])

    def muscle_index(self, name: str) -> int:
        """Index of a muscle element by its model name (e.g. ``trapscap1``)."""
        try:
            return self.muscle_names.index(name)
        except ValueError:
            raise KeyError(f"unknown muscle element {name!r}") from None
