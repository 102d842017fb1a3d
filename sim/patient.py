"""Virtual patients (issue 37): the state and strength of each DAS3 muscle group, applied to the model.

Each of the 28 muscle groups (an element's name without its number, ``bicb`` = ``bicb1``, ``bicb2``) is in one
state, after the upper- and lower-motor-neuron distinction of FES practice (Bryden et al. 2016, Arch Phys Med
Rehabil 97(6 Suppl 2):S97-S104; ISNCSCI levels, Kirshblum et al. 2011, J Spinal Cord Med 34:535-546):

- ``voluntary``: innervated from above the lesion, under the patient's own control. Surface stimulation
  excites it as well (its lower motor neurons are intact);
- ``paralysed``: an upper-motor-neuron lesion: no voluntary control, the lower motor neurons intact, so it
  responds to stimulation;
- ``denervated``: the lower motor neurons are lost (damage at the lesion level): no response to surface
  stimulation at normal pulse widths. The plant gates its excitation to 0 (``ModelConfig.denervated``).

``strength`` multiplies the group's Fmax (disuse atrophy, weakness; active, passive and tendon force scale
together, :func:`sim.das3.model.fmax_scale`), on top of ``[model] strength`` (the subject's own strength).
``[patient.size]`` scales the whole arm to the patient's height and mass (:mod:`sim.subject_size`).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from sim.config_schema import REQUIRED, Derived, Key, Section, from_ms
from sim.das3.config import STRENGTH_MAX, ModelConfig
from sim.das3.model import fmax_scale
from sim.das3.muscle_groups import group_members
from sim.das3.release import muscle_element_names
from sim.subject_size import SubjectSize

STATES = ("voluntary", "paralysed", "denervated")
ABLE_BODIED = "able-bodied"

PATIENT_SCHEMA = Section("patient", "The virtual patient: each muscle group's state and strength (a preset by "
                         "name or file, and/or groups given here; the run records the resolved table).", (
    Key("preset", "value", None, "a preset name (`hil patients`, `configs/patients/NAME.toml`) or a patient file "
        "(relative to this file); this table's own keys apply over it"),
    Key("name", "string", ABLE_BODIED, "the patient's label (recorded, shown by `hil model info`)"),
    Key("sources", "strings", [], "the publications the patient's states and strengths come from (text)"),
    Key("default_state", "string", "voluntary", "state of every group not listed", choices=STATES),
    Key("groups", "table", {}, "muscle group -> its state and strength ([patient.groups.<group>])",
        why="muscle group -> {state, strength}"),
    Key("size", "table", {}, "the patient's height and body mass, or length and mass scales ([patient.size]); "
        "the published arm if absent", why="height_m, body_mass_kg, length_scale, mass_scale, strength_rule"),
))

GROUP_SCHEMA = Section("patient.groups.<group>", "One DAS3 muscle group of the patient (a group name: `bicb`, "
                       "`deltscap`, ...; `hil model info --json` lists them).", (
    Key("state", "string", Derived("the patient's `default_state`", lambda read: None), "voluntary, paralysed "
        "(no voluntary control, stimulable) or denervated (no response to stimulation)", choices=STATES),
    Key("strength", "number", 1.0, "factor on the group's Fmax (atrophy, weakness), times [model] strength",
        lo=0.0, lo_exclusive=True, hi=STRENGTH_MAX),
    Key("spasticity", "table", {}, "the group's stretch reflex ([patient.groups.<group>.spasticity]); none if "
        "absent", why="gain, threshold_lceopt_per_s, delay_ms"),
    Key("contracture_lceopt", "number", 0.0, "contracture: the group's passive slack length shortened by this many "
        "optimal fibre lengths (its passive force rises at shorter lengths; the joints it crosses lose range)",
        lo=0.0, hi=0.9, field="contracture"),
))

SPASTICITY_SCHEMA = Section("patient.groups.<group>.spasticity", "A spastic group's velocity-dependent stretch "
                            "reflex, e = gain max(0, v(t - delay) - threshold), v the muscle-tendon lengthening "
                            "velocity in optimal fibre lengths per second (docs: virtual patients).", (
    Key("gain", "number", REQUIRED, "excitation per Lceopt/s of lengthening velocity above the threshold",
        lo=0.0, hi=100.0),
    Key("threshold_lceopt_per_s", "number", REQUIRED, "lengthening velocity (Lceopt/s) above which the reflex "
        "fires", lo=0.0, hi=100.0, field="threshold"),
    Key("delay_ms", "number", REQUIRED, "reflex delay (rounded to whole plant steps, at least one)", lo=0.0,
        hi=1000.0, field="delay_s", to_si=from_ms),
))


@dataclass(frozen=True)
class GroupState:
    state: str = "voluntary"
    strength: float = 1.0
    spasticity: tuple[float, float, float] | None = None     # (gain, threshold Lceopt/s, delay s)
    contracture: float = 0.0                                   # passive slack length shortened by, Lceopt


@dataclass(frozen=True)
class Patient:
    """A patient: its label, sources and every DAS3 muscle group's state, in the model's group order."""

    name: str = ABLE_BODIED
    sources: tuple[str, ...] = ()
    groups: tuple[tuple[str, GroupState], ...] = ()
    size: SubjectSize = SubjectSize()

    @property
    def able_bodied(self) -> bool:
        """Every group voluntary at full strength, at the reference size: the published model unchanged."""
        return all(g == GroupState() for _, g in self.groups) and self.size.reference

    def state_of(self, group: str) -> GroupState:
        return dict(self.groups).get(group, GroupState())

    def in_state(self, state: str) -> tuple[str, ...]:
        return tuple(group for group, g in self.groups if g.state == state)


def muscle_group_names() -> tuple[str, ...]:
    """The 28 DAS3 muscle groups, in the model's order."""
    return tuple(group_members(muscle_element_names()))


def apply_patient(model: ModelConfig, patient: Patient) -> ModelConfig:
    """``model`` with the patient's strengths multiplied into its Fmax factors, its denervated groups gated, its
    spastic groups' reflexes, its contractures and its size; ``model`` itself (unchanged, so bit-identical) when the patient is able-bodied."""
    if patient.able_bodied:
        return model
    names = muscle_element_names()
    scale = fmax_scale(model.strength, names)
    members = group_members(names)
    for group, g in patient.groups:
        scale[members[group]] *= g.strength
    reflexes = tuple((group, *g.spasticity) for group, g in patient.groups if g.spasticity is not None)
    contracted = tuple((group, g.contracture) for group, g in patient.groups if g.contracture > 0.0)
    size = patient.size
    sized = {} if size.reference else dict(length_scale=model.length_scale * size.length_scale,
                                           mass_scale=model.mass_scale * size.mass_scale,
                                           force_scale=model.force_scale * size.force_scale)
    return replace(model, strength=strength_pairs(scale, names),
                   denervated=model.denervated + patient.in_state("denervated"),
                   spasticity=model.spasticity + reflexes, contracture=model.contracture + contracted, **sized)


def strength_pairs(scale: np.ndarray, names: tuple[str, ...]) -> tuple[tuple[str, float], ...]:
    """(group or element, factor) pairs of the factors ≠ 1: one pair per group whose elements share a factor,
    else one per element."""
    pairs = []
    for group, idx in group_members(names).items():
        factors = scale[idx]
        if np.all(factors == factors[0]):
            pairs += [(group, float(factors[0]))] if factors[0] != 1.0 else []
        else:
            pairs += [(names[i], float(scale[i])) for i in idx if scale[i] != 1.0]
    return tuple(pairs)
