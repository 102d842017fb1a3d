"""A sweep's patient population (``[population]`` in a sweep file): patients sampled around presets, seeded.

Each sampled patient is a preset's ``[patient]`` table with its strengths and spasticity gains drawn around the
preset's and any other patient key drawn from a distribution (``[population.spread]``, e.g. a group's state or
the subject's size), so a controller meets a spread of arms, not four. The draws:

- strength of group g: s_g = s_g,preset x F_subject x F_g, with F log-normal of mean 1 and the configured
  coefficient of variation (``strength_cv`` across subjects, ``group_strength_cv`` across a subject's groups):
  F = exp(sigma z - sigma^2 / 2), sigma^2 = ln(1 + cv^2), z standard normal;
- each spastic group's reflex gain times its own such factor (``spasticity_gain_cv``);
- each ``[population.spread]`` key (a dotted path inside the patient table) from its distribution.

The coefficients are the sweep author's assumption about the spread of the population (docs: sweeps). Patient i
of preset p draws from a generator seeded by (seed, p, i), so adding patients or presets leaves the others
unchanged. The sampled table is what the run records (a replay needs no preset file).
"""
from __future__ import annotations

import copy
import math
import os
from dataclasses import dataclass

import numpy as np

from drivers.core.config_table import ConfigTable
from hil.patients import preset_path, preset_table, read_patient
from sim.config_schema import Key, Section
from sim.das3.config import STRENGTH_MAX, ConfigError
from sim.patient import muscle_group_names

MAX_PATIENTS = 10_000
STRENGTH_MIN = 1e-3
"""Floor of a sampled strength (the patient file's strength must be > 0)."""

POPULATION_SCHEMA = Section("population", "Patients sampled around presets, seeded (a sweep file's "
                            "[population] table; each patient runs at every grid point and random sample).", (
    Key("presets", "strings", ("c5-tetraplegia", "c6-tetraplegia", "stroke-hemiparesis"),
        "preset names or patient files (relative to the sweep file) the patients are sampled around"),
    Key("n", "integer", 1, "patients per preset", lo=1, hi=MAX_PATIENTS),
    Key("seed", "integer", 0, "seed of the draws: patient i of preset p draws from (seed, p, i)", lo=0,
        hi=2**63 - 1),
    Key("strength_cv", "number", 0.0, "coefficient of variation of a subject-wide factor on every group's strength",
        lo=0.0, hi=2.0),
    Key("group_strength_cv", "number", 0.0, "coefficient of variation of each group's own strength factor",
        lo=0.0, hi=2.0),
    Key("spasticity_gain_cv", "number", 0.0, "coefficient of variation of each spastic group's reflex gain",
        lo=0.0, hi=2.0),
    Key("spread", "table", {}, "patient key (dotted path in the [patient] table) -> {uniform = [lo, hi]}, "
        "{normal = [mean, sd]} or {choice = [values]}", why="dotted patient key -> distribution"),
))


@dataclass(frozen=True)
class Population:
    presets: tuple[str, ...]
    tables: tuple[dict, ...]           # each preset's [patient] table, read once
    n: int
    seed: int
    strength_cv: float
    group_strength_cv: float
    spasticity_gain_cv: float
    spread: tuple[tuple[str, tuple], ...]

    @property
    def size(self) -> int:
        return len(self.presets) * self.n


@dataclass(frozen=True)
class SampledPatient:
    label: str           # "<preset>/<i>"
    preset: str
    table: dict          # the patient's [patient] table (no preset key)
    strength_factor: float = 1.0    # the subject-wide strength factor drawn


def lognormal_factor(rng: np.random.Generator, cv: float) -> float:
    """A log-normal factor of mean 1 and coefficient of variation ``cv``: exp(sigma z - sigma^2/2),
    sigma^2 = ln(1 + cv^2) (1.0 when cv = 0, without a draw)."""
    if cv == 0.0:
        return 1.0
    sigma = math.sqrt(math.log1p(cv * cv))
    return math.exp(sigma * float(rng.standard_normal()) - 0.5 * sigma * sigma)


def draw(rng: np.random.Generator, dist: tuple):
    """One value of a distribution ("uniform", lo, hi) | ("normal", mean, sd) | ("choice", values)."""
    if dist[0] == "uniform":
        return float(rng.uniform(dist[1], dist[2]))
    if dist[0] == "normal":
        return float(dist[1] + dist[2] * rng.standard_normal())
    return dist[1][int(rng.integers(len(dist[1])))]


def read_population(doc: dict, path: str, distribution) -> Population | None:
    """The ``[population]`` table of a sweep file (None without one); ``distribution(key, value)`` reads a spread."""
    if "population" not in doc:
        return None
    reader = ConfigTable.section(doc, "population", path)
    values = reader.read(POPULATION_SCHEMA)
    reader.done()
    base_dir = os.path.dirname(os.path.abspath(path))
    presets = tuple(values["presets"])
    tables = tuple(preset_table(preset_path(p, base_dir, path, "population.presets"), path, "population.presets")
                   for p in presets)
    spread = tuple((k, distribution(f"population.spread.{k}", v)) for k, v in sorted(values["spread"].items()))
    population = Population(presets, tables, values["n"], values["seed"], values["strength_cv"],
                            values["group_strength_cv"], values["spasticity_gain_cv"], spread)
    try:
        patients = sample_patients(population)
    except ConfigError as exc:                           # a spread key that is not a path into the table
        raise ConfigError(exc.reason, file=path, key=exc.key) from None
    for patient in patients:                            # every sampled table is a valid patient, or one error line
        try:
            read_patient(patient.table, path)
        except ConfigError as exc:
            raise ConfigError(f"sampled patient {patient.label}: {exc.reason}", file=path,
                              key="population") from None
    return population


def sample_patients(population: Population) -> list[SampledPatient]:
    """Every patient of the population, in preset order then index."""
    return [sample_one(population, p, i) for p in range(len(population.presets)) for i in range(population.n)]


def sample_one(population: Population, preset_index: int, i: int) -> SampledPatient:
    """Patient ``i`` of preset ``preset_index``: the preset's table with its draws (module docstring)."""
    rng = np.random.default_rng([population.seed, preset_index, i])
    table = copy.deepcopy(population.tables[preset_index])
    table.pop("preset", None)
    groups = table.setdefault("groups", {})
    subject = lognormal_factor(rng, population.strength_cv)
    for group in muscle_group_names():
        spec = groups.setdefault(group, {})
        base = float(spec.get("strength", 1.0))
        spec["strength"] = min(STRENGTH_MAX, max(STRENGTH_MIN, base * subject
                                                 * lognormal_factor(rng, population.group_strength_cv)))
        factor = lognormal_factor(rng, population.spasticity_gain_cv)
        if isinstance(spec.get("spasticity"), dict) and "gain" in spec["spasticity"]:
            spec["spasticity"] = {**spec["spasticity"], "gain": float(spec["spasticity"]["gain"]) * factor}
    for key, dist in population.spread:
        _set_path(table, key, draw(rng, dist))
    name = population.presets[preset_index]
    label = f"{os.path.splitext(os.path.basename(name))[0]}/{i:0{len(str(population.n - 1))}d}"
    table["name"] = f"{table.get('name', name)} (sampled {label})"
    return SampledPatient(label, name, table, subject)


def _set_path(table: dict, dotted: str, value) -> None:
    node = table
    parts = dotted.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{part} is not a table", key=f"population.spread.{dotted}")
    node[parts[-1]] = value
