"""Model options: :class:`ModelConfig` and its TOML file format (``configs/model.toml``).

The file has one table, ``[model]``; every key is optional and defaults to the published DAS3
release. Angles are given in degrees in the file (keys ending in ``_deg``) and stored in radians in
:class:`ModelConfig`; everything else is SI.
"""
from __future__ import annotations

import difflib
import math
import tomllib
from dataclasses import dataclass
from os import PathLike

from sim.config_schema import Key, Section
from sim.das3.muscle_groups import element_indices, unknown_muscle
from sim.das3.release import muscle_element_names
from sim.errors import UserInputError
from sim.input_file import InputFileError, read_input_file

__all__ = ["MODEL_SCHEMA", "ConfigError", "ModelConfig", "load_model_config", "model_config_from_table",
           "not_utf8", "unknown_name"]


class ConfigError(UserInputError, ValueError):
    """A model configuration that cannot be used. The message names the file, the key and the reason."""

    def __init__(self, reason: str, *, file: str | PathLike | None = None, key: str | None = None):
        self.file = None if file is None else str(file)
        self.key = key
        self.reason = reason
        where = [part for part in (self.file, None if key is None else f"key {key!r}") if part]
        super().__init__(": ".join([", ".join(where), reason]) if where else reason)


STRENGTH_MAX = 10.0
CONTRACTURE_MAX = 1.0
"""Largest shortening of a passive slack length, Lceopt (the published PEE slack lengths are 1.0-1.6 Lceopt)."""
SIZE_SCALE_MAX = 10.0
"""Largest size factor a ModelConfig takes (the patient's size keys are bounded tighter, ``sim.subject_size``)."""
MUSCLE_MODEL_NAMES = ("das3", "thelen2003")
SHOULDER_PASSIVE_NAMES = ("das3", "das3+engin")


def _strength_pairs(table: dict) -> tuple[tuple[str, float], ...]:
    """{name: factor} -> ((name, factor), ...)."""
    return tuple((k, float(v)) for k, v in table.items())


MODEL_SCHEMA = Section("model", "Options of the DAS3 model; the defaults reproduce the published release.", (
    Key("hand_weight", "boolean", False, "apply gravity to the hand (the published release gives it inertia only)"),
    Key("gh_rim_theta_deg", "number", 44.37, "half-angle of the glenoid rim, superior-inferior", lo=0.0, hi=90.0,
        lo_exclusive=True, hi_exclusive=True, field="gh_rim_theta", to_si=math.radians),
    Key("gh_rim_phi_deg", "number", 38.55, "half-angle of the glenoid rim, anterior-posterior", lo=0.0, hi=90.0,
        lo_exclusive=True, hi_exclusive=True, field="gh_rim_phi", to_si=math.radians),
    Key("joint_k1", "number", 1.0, "linear passive joint stiffness K1 about the middle of each DOF range, Nm/rad",
        lo=0.0, to_si=float),
    Key("joint_k2", "number", 5000.0, "quadratic stiffness K2 outside the DOF range, Nm/rad^2", lo=0.0,
        to_si=float),
    Key("joint_damping", "number", 1.0, "passive joint damping B, Nm s/rad", lo=0.0, to_si=float),
    Key("muscle_model", "string", "das3", "contraction and activation model of all muscle elements",
        choices=MUSCLE_MODEL_NAMES),
    Key("shoulder_passive", "string", "das3", "passive shoulder moments: the published per-DOF ones, or those "
        "plus Engin's directional thoracohumeral moments", choices=SHOULDER_PASSIVE_NAMES),
    Key("strength", "table", {}, f"muscle element or group -> factor in (0, {STRENGTH_MAX:g}] on its Fmax, "
        "e.g. {bicb = 0.5}", to_si=_strength_pairs),
))


@dataclass(frozen=True)
class ModelConfig:
    """Options of the DAS3 model (:data:`MODEL_SCHEMA` gives each key's default and doc).

    Attributes:
        hand_weight: apply gravity to the hand. The published release gives the hand inertia but no
            weight (its published equilibrium has none), so this is off by default.
        gh_rim_theta: half-angle of the glenoid rim in the superior-inferior direction, rad.
        gh_rim_phi: half-angle of the glenoid rim in the anterior-posterior direction, rad.
        joint_k1: linear passive joint stiffness K1 about the middle of each DOF range, Nm/rad.
        joint_k2: quadratic stiffness K2 outside the DOF range, Nm/rad^2.
        joint_damping: passive joint damping B, Nm s/rad.
        muscle_model: contraction and activation model of all 138 elements: ``das3`` (the published
            model) or ``thelen2003`` (OpenSim's Thelen2003Muscle on each element's Fmax, L_CEopt,
            pennation and SEE slack length; ``sim.das3.kernels.thelen``).
        shoulder_passive: passive moments of the shoulder: ``das3`` (the published per-DOF moments) or
            ``das3+engin`` (those plus Engin's directional thoracohumeral moments beyond the shoulder
            sinus and about the humeral axis; ``sim.das3.engin``).
        strength: (muscle element or group, factor) pairs: the factor multiplies the elements' Fmax (a weak,
            atrophied or strong muscle of a patient variant); unnamed elements keep the published Fmax. The
            rest posture is re-solved for the changed passive forces.
        denervated: muscle elements or groups (as ``strength`` names them) whose excitation the plant gates to 0:
            lower-motor-neuron damage, no response to any stimulation. Set by a patient, not a ``[model]`` key.
        spasticity: (muscle element or group, gain per Lceopt/s, threshold Lceopt/s, delay s) of each spastic
            muscle's stretch reflex (``sim.das3.kernels.reflex``). Set by a patient, not a ``[model]`` key.
        contracture: (muscle element or group, shift) pairs: the passive element's slack length is shorter by
            ``shift`` optimal fibre lengths (a contracted muscle: its passive force rises at shorter lengths); DAS3
            Hill elements only. The rest posture is re-solved. Set by a patient, not a ``[model]`` key.
        length_scale, mass_scale, force_scale: the subject's size (``sim.subject_size``): factors on every length,
            on every segment mass, and on Fmax and the passive structures' forces; all 1 (the default) leave the
            published model untouched. The rest posture is re-solved. Set by a patient, not a ``[model]`` key.
    """

    hand_weight: bool = MODEL_SCHEMA.default("hand_weight")
    gh_rim_theta: float = MODEL_SCHEMA.default("gh_rim_theta")
    gh_rim_phi: float = MODEL_SCHEMA.default("gh_rim_phi")
    joint_k1: float = MODEL_SCHEMA.default("joint_k1")
    joint_k2: float = MODEL_SCHEMA.default("joint_k2")
    joint_damping: float = MODEL_SCHEMA.default("joint_damping")
    muscle_model: str = MODEL_SCHEMA.default("muscle_model")
    shoulder_passive: str = MODEL_SCHEMA.default("shoulder_passive")
    strength: tuple[tuple[str, float], ...] = MODEL_SCHEMA.default("strength")
    denervated: tuple[str, ...] = ()
    spasticity: tuple[tuple[str, float, float, float], ...] = ()
    contracture: tuple[tuple[str, float], ...] = ()
    length_scale: float = 1.0
    mass_scale: float = 1.0
    force_scale: float = 1.0

    @property
    def sized(self) -> bool:
        """Whether any size factor is not 1 (the model is scaled, ``sim.subject_size``)."""
        return self.length_scale != 1.0 or self.mass_scale != 1.0 or self.force_scale != 1.0

    def __post_init__(self) -> None:
        for key in MODEL_SCHEMA.keys:
            reason = _check(key, getattr(self, key.field), in_file_units=False)
            if reason is not None:
                raise ConfigError(reason, key=key.field)
        for key, check in (("denervated", _check_denervated), ("spasticity", _check_spasticity),
                           ("contracture", _check_contracture)):
            reason = check(getattr(self, key))
            if reason is not None:
                raise ConfigError(reason, key=key)
        for key in ("length_scale", "mass_scale", "force_scale"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < value <= SIZE_SCALE_MAX:
                raise ConfigError(f"must be a number in (0, {SIZE_SCALE_MAX:g}], not {value!r}", key=key)
        if self.contracture and self.muscle_model != "das3":
            raise ConfigError("a contracture shortens the DAS3 Hill element's passive slack length; "
                              f"muscle_model {self.muscle_model!r} has none", key="contracture")


_FIELD_KEYS = {key.field: key for key in MODEL_SCHEMA.keys}


def _check(key: Key, value: object, *, in_file_units: bool) -> str | None:
    """Why ``value`` is not valid for schema key ``key`` (in file or dataclass units), or None."""
    if key.kind == "boolean":
        return None if isinstance(value, bool) else f"must be true or false, not {value!r}"
    if key.choices is not None:
        return None if value in key.choices else f"must be one of {', '.join(key.choices)}, not {value!r}"
    if key.kind == "table":
        return _check_strength(value, in_file_units)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"must be a number, not {value!r}"
    if not math.isfinite(value):
        return f"must be finite, not {value!r}"
    if key.hi_exclusive:
        hi, unit = (key.hi, "degrees") if in_file_units else (key.si(key.hi), "rad")
        if not key.lo < value < hi:
            return f"must be strictly between {key.lo:g} and {hi:g} {unit}, not {value!r}"
    elif value < key.lo:
        return f"must be >= {key.lo:g}, not {value!r}"
    return None


def _check_strength(value: object, in_file_units: bool) -> str | None:
    """Why a strength table (file: {name: factor}; dataclass: ((name, factor), ...)) is not valid, or None."""
    if in_file_units and not isinstance(value, dict):
        return "must be a table of muscle element or group -> factor on Fmax, e.g. {bicb = 0.5}"
    pairs = value.items() if in_file_units else value
    for key, factor in pairs:
        if (reason := _not_a_muscle(key)) is not None:
            return reason
        if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 0.0 < factor <= STRENGTH_MAX:
            return f"factor of {key!r} must be a number in (0, {STRENGTH_MAX:g}], not {factor!r}"
    return None


def _not_a_muscle(key) -> str | None:
    """The error for ``key`` if it is no muscle element or group name, else None."""
    names = muscle_element_names()
    return unknown_muscle(str(key), names) if not isinstance(key, str) or element_indices(key, names) is None \
        else None


def _check_denervated(value: object) -> str | None:
    """Why ``denervated`` (a tuple of muscle element or group names) is not valid, or None."""
    if not isinstance(value, tuple) or not all(isinstance(name, str) for name in value):
        return f"must be a tuple of muscle element or group names, not {value!r}"
    return next((reason for reason in map(_not_a_muscle, value) if reason is not None), None)


def _check_spasticity(value: object) -> str | None:
    """Why ``spasticity`` ((name, gain, threshold, delay) tuples) is not valid, or None."""
    if not isinstance(value, tuple) or not all(isinstance(v, tuple) and len(v) == 4 for v in value):
        return f"must be a tuple of (muscle, gain, threshold, delay) tuples, not {value!r}"
    for name, *numbers in value:
        if (reason := _not_a_muscle(name)) is not None:
            return reason
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
                   for v in numbers):
            return f"gain, threshold and delay of {name!r} must be finite numbers >= 0, not {tuple(numbers)!r}"
    return None


def _check_contracture(value: object) -> str | None:
    """Why ``contracture`` ((name, shift) pairs, 0 <= shift < CONTRACTURE_MAX Lceopt) is not valid, or None."""
    if not isinstance(value, tuple) or not all(isinstance(v, tuple) and len(v) == 2 for v in value):
        return f"must be a tuple of (muscle, shift) pairs, not {value!r}"
    for name, shift in value:
        if (reason := _not_a_muscle(name)) is not None:
            return reason
        if isinstance(shift, bool) or not isinstance(shift, (int, float)) or not 0.0 <= shift < CONTRACTURE_MAX:
            return f"shift of {name!r} must be a number in [0, {CONTRACTURE_MAX:g}) Lceopt, not {shift!r}"
    return None


def unknown_name(kind: str, name: str, valid) -> str:
    """'unknown key 'perod_ms' (did you mean 'period_ms'?); valid: ...' for config errors."""
    close = difflib.get_close_matches(name, list(valid), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown {kind} {name!r}{hint}; valid: {', '.join(sorted(valid))}"


def not_utf8(exc: UnicodeDecodeError) -> str:
    """'not UTF-8 text: byte 0xe9 on line 3 (...)' for a file's bytes that failed to decode, so the
    user can find the character (a Latin-1 'é' from an old editor, say) without a traceback."""
    data = exc.object
    line = data.count(b"\n", 0, exc.start) + 1
    return f"not UTF-8 text: byte 0x{data[exc.start]:02x} on line {line} ({exc.reason}); save the file as UTF-8"


def read_toml_document(path: str | PathLike) -> dict:
    """A config file's TOML document, read as a bounded regular file (:mod:`sim.input_file`); every way it cannot
    be read is one :class:`ConfigError` naming the file."""
    try:
        return tomllib.loads(read_input_file(path).decode("utf-8"))
    except InputFileError as exc:
        raise ConfigError(exc.reason, file=path) from None
    except OSError as exc:
        raise ConfigError(f"cannot read file: {exc.strerror or exc}", file=path) from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"invalid TOML: {exc}", file=path) from exc
    except UnicodeDecodeError as exc:     # tomllib decodes the whole file as UTF-8 first
        raise ConfigError(not_utf8(exc), file=path) from None


def load_model_config(path: str | PathLike) -> ModelConfig:
    """Read a model configuration TOML file (see ``configs/model.toml``).

    Every key of the ``[model]`` table is optional; missing keys keep the published defaults.

    Raises:
        ConfigError: the file cannot be read, is not UTF-8 or not TOML, or has an unknown table or key, a value of
            the wrong type, a non-finite value or a value out of range.
    """
    doc = read_toml_document(path)
    for table in doc:
        if table != "model":
            raise ConfigError(unknown_name("table", table, ["model"]), file=path, key=table)
    return model_config_from_table(doc.get("model", {}), file=path)


def model_config_from_table(section, *, file: str | PathLike | None = None,
                            prefix: str = "") -> ModelConfig:
    """A :class:`ModelConfig` from a parsed ``[model]`` table (also used inside service configs)."""
    if not isinstance(section, dict):
        raise ConfigError("must be a table ([model])", file=file, key=prefix + "model")
    values: dict[str, object] = {}
    for name, raw in section.items():
        if name not in MODEL_SCHEMA.by_name:
            raise ConfigError(unknown_name("key", name, MODEL_SCHEMA.by_name), file=file, key=prefix + name)
        key = MODEL_SCHEMA.key(name)
        reason = _check(key, raw, in_file_units=True)
        if reason is not None:
            raise ConfigError(reason, file=file, key=prefix + name)
        values[key.field] = key.si(raw)
    try:
        return ModelConfig(**values)
    except ConfigError as exc:  # only if a conversion rounds onto a bound
        raise ConfigError(exc.reason, file=file, key=prefix + _FIELD_KEYS[exc.key].name) from None
