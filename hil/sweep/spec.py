"""A sweep file (``hil sweep SWEEP.toml``): a base service config and the parameters to vary, as a grid and/or
random samples, over any key of the config by its dotted path.

    base = "../configs/elbow-hold.toml"       # relative to the sweep file
    duration_s = 5.0                          # each run, offline
    keep_recordings = false                   # true: DIR/runs/<id>.hilrec per run
    settling_band_deg = 2.0                   # run metrics (hil.reports.run_metrics)

    [grid]                                    # every combination
    "driver.0.kp_ma_per_rad" = [40, 80, 120]  # [[driver]] tables by index
    "sensor.seed" = [0, 1]

    [random]                                  # n samples (seeded), the same ones at every grid point
    n = 4
    seed = 7
    "driver.0.target_deg" = {uniform = [60, 120]}
    "sensor.angle_noise_deg" = {choice = [0.0, 0.5, 1.0]}

    [population]                              # patients sampled around presets (hil.sweep.population)
    presets = ["c5-tetraplegia", "stroke-hemiparesis"]
    n = 10
    strength_cv = 0.3

    [failure]                                 # when a run is a failure of the controller (hil.sweep.failures)
    max_rms_error_deg = 10.0

Each grid point runs with each random sample and each patient of the population.

A run's id is a hash of its parameter values, so a sweep restarted into the same directory skips the runs it
finished (:mod:`hil.sweep.runner`).
"""
from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
import os
import tomllib
from dataclasses import dataclass, field

import numpy as np

from hil.sweep.failures import read_failure
from hil.sweep.population import Population, SampledPatient, read_population, sample_patients
from sim.das3.config import ConfigError
from sim.input_file import InputFileError, read_input_file

MAX_RUNS = 100_000


@dataclass(frozen=True)
class Variant:
    id: str
    values: dict          # dotted key -> value
    patient: SampledPatient | None = None     # a population's sampled patient

    @property
    def columns(self) -> dict:
        """The variant's columns of a results row: the swept values, and the patient of a population."""
        if self.patient is None:
            return dict(self.values)
        return {**self.values, "patient_preset": self.patient.preset, "patient": self.patient.label,
                "patient_strength_factor": self.patient.strength_factor}


@dataclass(frozen=True)
class SweepSpec:
    path: str
    base: str                        # the base service config (absolute)
    duration_s: float
    keep_recordings: bool
    settling_band_rad: float
    grid: dict = field(default_factory=dict)          # key -> list of values
    random: dict = field(default_factory=dict)        # key -> ("uniform", lo, hi) | ("choice", values)
    random_n: int = 0
    random_seed: int = 0
    population: Population | None = None
    failure: dict = field(default_factory=lambda: read_failure({}, ""))

    @property
    def keys(self) -> list[str]:
        """The columns that tell runs apart: the swept keys, and a population's preset and patient."""
        return [*self.grid, *self.random,
                *(("patient_preset", "patient", "patient_strength_factor") if self.population else ())]


def _error(path, key, reason):
    return ConfigError(reason, file=path, key=key)


def _distribution(path, key, value):
    if isinstance(value, dict) and set(value) == {"uniform"} and isinstance(value["uniform"], list) \
            and len(value["uniform"]) == 2 and all(isinstance(v, (int, float)) for v in value["uniform"]):
        lo, hi = (float(v) for v in value["uniform"])
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise _error(path, key, "uniform needs two finite numbers, low < high")
        return ("uniform", lo, hi)
    if isinstance(value, dict) and set(value) == {"normal"} and isinstance(value["normal"], list) \
            and len(value["normal"]) == 2 and all(isinstance(v, (int, float)) for v in value["normal"]):
        mean, sd = (float(v) for v in value["normal"])
        if not (math.isfinite(mean) and math.isfinite(sd) and sd > 0.0):
            raise _error(path, key, "normal needs a finite mean and a standard deviation > 0")
        return ("normal", mean, sd)
    if isinstance(value, dict) and set(value) == {"choice"} and isinstance(value["choice"], list) and value["choice"]:
        return ("choice", list(value["choice"]))
    raise _error(path, key, "must be {uniform = [low, high]}, {normal = [mean, sd]} or {choice = [values]}")


def load_sweep(path: str) -> SweepSpec:
    """The validated sweep file (the base config itself is validated per variant when it runs)."""
    try:
        doc = tomllib.loads(read_input_file(path).decode("utf-8"))
    except InputFileError as exc:
        raise _error(path, None, exc.reason) from None
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise _error(path, None, f"cannot read the sweep file: {exc}") from None
    unknown = set(doc) - {"base", "duration_s", "keep_recordings", "settling_band_deg", "grid", "random",
                          "population", "failure"}
    if unknown:
        raise _error(path, sorted(unknown)[0], "unknown key")
    base = doc.get("base")
    if not isinstance(base, str):
        raise _error(path, "base", "the base service config file is required")
    base = base if os.path.isabs(base) else os.path.join(os.path.dirname(os.path.abspath(path)), base)
    if not os.path.isfile(base):
        raise _error(path, "base", f"{base} not found")
    duration = doc.get("duration_s", 5.0)
    if isinstance(duration, bool) or not isinstance(duration, (int, float)) or not 0.0 < duration <= 3600.0:
        raise _error(path, "duration_s", "must be a number in (0, 3600] s")
    band = doc.get("settling_band_deg", 2.0)
    if isinstance(band, bool) or not isinstance(band, (int, float)) or not band > 0.0:
        raise _error(path, "settling_band_deg", "must be a number > 0")
    grid = doc.get("grid", {})
    if not isinstance(grid, dict) or not all(isinstance(v, list) and v for v in grid.values()):
        raise _error(path, "grid", "each key needs a non-empty list of values")
    if not isinstance(doc.get("random", {}), dict):
        raise _error(path, "random", "must be a table ([random])")
    rnd = dict(doc.get("random", {}))
    n, seed = rnd.pop("n", 0), rnd.pop("seed", 0)
    if not (isinstance(n, int) and n >= 0 and isinstance(seed, int) and seed >= 0):
        raise _error(path, "random", "n and seed must be integers >= 0")
    population = read_population(doc, path, lambda key, value: _distribution(path, key, value))
    _check_run_count(path, grid, (n if rnd else 1) * (population.size if population else 1))
    dists = {k: _distribution(path, f"random.{k}", v) for k, v in rnd.items()}
    if rnd and n == 0:
        raise _error(path, "random.n", "random parameters need n >= 1 samples")
    if set(grid) & set(dists):
        raise _error(path, "random", "a key cannot be both in [grid] and in [random]")
    if population and any(k == "patient" or k.startswith("patient.") for k in [*grid, *dists]):
        raise _error(path, "population", "a sweep with a [population] cannot also vary patient keys in [grid] or "
                                         "[random] (use [population.spread])")
    return SweepSpec(path=str(path), base=base, duration_s=float(duration),
                     keep_recordings=bool(doc.get("keep_recordings", False)),
                     settling_band_rad=math.radians(float(band)), grid=grid, random=dists, random_n=n,
                     random_seed=seed, population=population, failure=read_failure(doc, path))


def _check_run_count(path: str, grid: dict, samples: int) -> None:
    """Refuse more than MAX_RUNS runs, counted from the sizes alone before any run is built."""
    points = math.prod(len(values) for values in grid.values())
    if points * samples > MAX_RUNS:
        key = "random.n" if samples > MAX_RUNS or not grid else "grid"
        raise _error(path, key, f"{points} grid point(s) x {samples} random sample(s) = {points * samples} runs; "
                                f"at most {MAX_RUNS}")


def variant_id(values: dict) -> str:
    """A short, stable hash of a run's parameter values."""
    return hashlib.sha1(json.dumps(values, sort_keys=True, default=float).encode()).hexdigest()[:12]


def variants(spec: SweepSpec) -> list[Variant]:
    """Every grid point with each of the ``random_n`` seeded samples of the random keys, the same samples at every
    grid point (a paired design), each with every patient of the population; one run if none is given."""
    patients = sample_patients(spec.population) if spec.population else []
    _check_run_count(spec.path, spec.grid, (spec.random_n if spec.random else 1) * max(len(patients), 1))
    points = [dict(zip(spec.grid, combo)) for combo in itertools.product(*spec.grid.values())] or [{}]
    rng = np.random.default_rng(spec.random_seed)
    samples = []
    for _ in range(spec.random_n if spec.random else 1):
        sample = {}
        for key, dist in spec.random.items():
            if dist[0] == "uniform":
                sample[key] = float(rng.uniform(dist[1], dist[2]))
            else:
                sample[key] = dist[1][int(rng.integers(len(dist[1])))]
        samples.append(sample)
    if not patients:
        return [Variant(variant_id({**p, **s}), {**p, **s}) for p in points for s in samples]
    return [Variant(variant_id({**p, **s, "patient": pt.table}), {**p, **s}, pt)
            for p in points for s in samples for pt in patients]


def apply_overrides(raw: dict, values: dict, path: str) -> dict:
    """A copy of the merged config document with each dotted key set (``driver.0.kp`` indexes [[driver]])."""
    doc = copy.deepcopy(raw)
    for dotted, value in values.items():
        parts = dotted.split(".")
        node = doc
        for i, part in enumerate(parts[:-1]):
            if isinstance(node, list):
                if not part.isdigit() or int(part) >= len(node):
                    raise _error(path, dotted, f"{'.'.join(parts[:i])} has no entry {part}")
                node = node[int(part)]
            else:
                node = node.setdefault(part, {})
            if not isinstance(node, (dict, list)):
                raise _error(path, dotted, f"{'.'.join(parts[:i + 1])} is not a table")
        if isinstance(node, list):
            raise _error(path, dotted, "names an array, not a key")
        node[parts[-1]] = value
    return doc
