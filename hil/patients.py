"""The ``[patient]`` table of a config: presets (``configs/patients/NAME.toml``), patient files and the groups
given in the config itself, resolved to one :class:`sim.patient.Patient` and the complete table the run records
(every group's state and strength, no ``preset`` key), so a replay never reads a preset file."""
from __future__ import annotations

import copy
import dataclasses
import os
from pathlib import Path

from drivers.core.config_table import ConfigTable
from sim.das3.config import ConfigError, ModelConfig, read_toml_document, unknown_name
from sim.das3.kinematics import segment_sizes
from sim.das3.model import fmax_scale, load_model
from sim.das3.muscle_groups import group_members, group_of
from sim.das3.release import muscle_element_names
from sim.mtg.model import mtg_model_for
from sim.patient import (
    GROUP_SCHEMA,
    PATIENT_SCHEMA,
    SPASTICITY_SCHEMA,
    GroupState,
    Patient,
    apply_patient,
    muscle_group_names,
)
from sim.subject_size import REFERENCE_HEIGHT_M, REFERENCE_MASS_KG, SIZE_SCHEMA, SubjectSize, size_from_values

PRESET_DIR = Path(__file__).resolve().parents[1] / "configs" / "patients"
"""The shipped presets (a source checkout's ``configs/patients``)."""


def preset_names() -> tuple[str, ...]:
    return tuple(sorted(p.stem for p in PRESET_DIR.glob("*.toml")))


def names_a_file(value: str) -> bool:
    """Whether a ``preset`` value is a patient file (``.toml`` or a path), not a shipped preset's name."""
    return value.endswith(".toml") or os.sep in value or "/" in value


def preset_path(value, base_dir: str, file: str, key: str) -> str:
    """The file a ``preset`` value names: a shipped preset's name, or a ``.toml`` file relative to ``base_dir``."""
    if not isinstance(value, str) or not value:
        raise ConfigError(f"must be a preset name or a patient file, not {value!r}", file=file, key=key)
    if names_a_file(value):
        return os.path.join(base_dir, value)
    if value not in preset_names():
        raise ConfigError(unknown_name("preset", value, preset_names()), file=file, key=key)
    return str(PRESET_DIR / f"{value}.toml")


def preset_table(path: str, file: str, key: str) -> dict:
    """The ``[patient]`` table of a preset or patient file (which names no other preset)."""
    doc = read_toml_document(path)
    extra = [k for k in doc if k != "patient"]
    if extra or not isinstance(doc.get("patient"), dict):
        raise ConfigError(f"{path}: a patient file holds one [patient] table and nothing else", file=file, key=key)
    if "preset" in doc["patient"]:
        raise ConfigError(f"{path}: a patient file cannot name another preset", file=file, key=key)
    return doc["patient"]


def merged_patient_table(table: dict, file: str) -> dict:
    """``table`` over the preset it names (key by key; a group's keys over the preset's group), without ``preset``."""
    if not isinstance(table, dict):
        raise ConfigError("must be a table ([patient])", file=file, key="patient")
    if "preset" not in table:
        return copy.deepcopy(table)
    base_dir = os.path.dirname(os.path.abspath(file)) if file else os.getcwd()
    merged = copy.deepcopy(preset_table(preset_path(table["preset"], base_dir, file, "patient.preset"), file,
                                        "patient.preset"))
    for name, value in table.items():
        if name == "groups" and isinstance(value, dict) and isinstance(merged.get("groups"), dict):
            for group, spec in value.items():
                base = merged["groups"].get(group)
                merged["groups"][group] = {**base, **spec} if isinstance(base, dict) and isinstance(spec, dict) \
                    else copy.deepcopy(spec)
        elif name != "preset":
            merged[name] = copy.deepcopy(value)
    return merged


def read_patient(table: dict | None, file: str) -> tuple[Patient, dict | None]:
    """(the patient, its resolved table to record) from a config's ``[patient]`` table; (able-bodied, None)
    without one."""
    if table is None:
        return Patient(groups=tuple((g, GroupState()) for g in muscle_group_names())), None
    reader = ConfigTable(merged_patient_table(table, file), "patient", file)
    values = reader.read(PATIENT_SCHEMA)
    reader.done()
    groups = _read_groups(values["groups"], values["default_state"], file)
    patient = Patient(name=values["name"], sources=values["sources"], groups=groups,
                      size=_read_size(values["size"], file))
    return patient, resolved_table(patient)


def _read_size(table: dict, file: str) -> SubjectSize:
    """The size of a ``[patient.size]`` table (the reference without one); a height with a length scale, or a
    body mass with a mass scale, is one error naming the second key."""
    reader = ConfigTable(table, "patient.size", file)
    values = {key.name: reader.key(key) if key.name in table or key.default is not None else None
              for key in SIZE_SCHEMA.keys}
    reader.used.update(SIZE_SCHEMA.by_name)         # the optional keys not given, for the error's suggestions
    reader.done()
    size, conflict = size_from_values(values)
    if size is None:
        other = {"length_scale": "height_m", "mass_scale": "body_mass_kg"}[conflict]
        raise ConfigError(f"give {other} or {conflict}, not both", file=file, key=f"patient.size.{conflict}")
    return size


def _read_groups(table: dict, default_state: str, file: str) -> tuple[tuple[str, GroupState], ...]:
    """Every DAS3 group's state (``default_state`` where the table does not list it) and strength."""
    known = muscle_group_names()
    for name in table:
        if name not in known:
            raise ConfigError(_not_a_group(name, known), file=file, key=f"patient.groups.{name}")
    groups = []
    for group in known:
        reader = ConfigTable(table.get(group, {}), f"patient.groups.{group}", file)
        read: dict = {}
        for key in GROUP_SCHEMA.keys:
            read[key.name] = reader.key(key, read, default=default_state if key.name == "state" else None)
        reader.done()
        groups.append((group, GroupState(state=read["state"], strength=float(read["strength"]),
                                         spasticity=_read_spasticity(read["spasticity"], group, file),
                                         contracture=float(read["contracture_lceopt"]))))
    return tuple(groups)


def _read_spasticity(table: dict, group: str, file: str) -> tuple[float, float, float] | None:
    """(gain, threshold, delay s) of a group's ``spasticity`` table, None if it has none."""
    if not table:
        return None
    reader = ConfigTable(table, f"patient.groups.{group}.spasticity", file)
    values = reader.read(SPASTICITY_SCHEMA)
    reader.done()
    return float(values["gain"]), float(values["threshold"]), float(values["delay_s"])


def _not_a_group(name: str, known) -> str:
    if name in muscle_element_names():
        return f"{name!r} is a muscle element; a patient's states are per group ({group_of(name)})"
    return unknown_name("muscle group", name, known)


def resolved_table(patient: Patient) -> dict:
    """The complete ``[patient]`` table of a patient (every group listed), as recorded in a run's header."""
    table = {"name": patient.name, "sources": list(patient.sources),
             "groups": {group: _group_table(g) for group, g in patient.groups}}
    if not patient.size.reference:          # the keys as given: a replay derives the same scales
        table["size"] = dict(patient.size.given)
    return table


def _group_table(g: GroupState) -> dict:
    table = {"state": g.state, "strength": g.strength}
    if g.contracture > 0.0:
        table["contracture_lceopt"] = g.contracture
    if g.spasticity is not None:
        gain, threshold, delay_s = g.spasticity
        table["spasticity"] = {"gain": gain, "threshold_lceopt_per_s": threshold, "delay_ms": delay_s * 1e3}
    return table


def patient_override(value: str | None) -> dict | None:
    """The ``[patient]`` table of ``hil run --patient NAME|FILE`` (a file relative to the working directory)."""
    if value is None:
        return None
    return {"preset": os.path.abspath(value) if names_a_file(value) else value}


def patient_arm(plant: str, patient: Patient | None, **changes):
    """The model of ``plant`` (das3 or mtg; the caller checks the name) built for ``patient`` (None: able-bodied),
    on the published model options with the fields ``changes`` replaced."""
    config = ModelConfig() if patient is None else apply_patient(ModelConfig(), patient)
    config = dataclasses.replace(config, **changes)
    return mtg_model_for(config, patient) if plant == "mtg" else load_model(config)


def load_patient(value: str) -> Patient:
    """The patient of a command-line ``--patient NAME|FILE`` (a file relative to the working directory)."""
    return read_patient(patient_override(value), "--patient")[0]


def patient_groups(patient: Patient, model) -> list[dict]:
    """Each group's state, the patient's strength, the resulting factors on its elements' Fmax (with
    ``[model] strength``), whether stimulation excites it and its elements, for ``hil model info --patient``."""
    scale = fmax_scale(model.config.strength, model.muscle_names)
    rows = []
    for group, idx in group_members(model.muscle_names).items():
        g = patient.state_of(group)
        rows.append({"group": group, "state": g.state, "strength": g.strength,
                     "fmax_factor": sorted({float(f) for f in scale[idx]}),
                     "stimulable": g.state != "denervated", "elements": [model.muscle_names[i] for i in idx],
                     "spasticity": _group_table(g).get("spasticity"), "contracture_lceopt": g.contracture})
    return rows


def patient_size(patient: Patient, model) -> dict:
    """The patient's size for ``hil model info --patient``: the model's scales (with ``[model]``'s, which are 1),
    the strength rule, the assumed reference subject and each body segment's length and mass."""
    config = model.config
    return {"length_scale": config.length_scale, "mass_scale": config.mass_scale, "force_scale": config.force_scale,
            "strength_rule": patient.size.strength_rule, "given": dict(patient.size.given),
            "reference_height_m": REFERENCE_HEIGHT_M, "reference_body_mass_kg": REFERENCE_MASS_KG,
            "segments": segment_sizes(model.arrays, config.length_scale)}
