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

from sim.errors import UserInputError
from sim.input_file import InputFileError, read_input_file

__all__ = ["ConfigError", "ModelConfig", "load_model_config", "model_config_from_table",
           "not_utf8", "unknown_name"]


class ConfigError(UserInputError, ValueError):
    """A model configuration that cannot be used. The message names the file, the key and the reason."""

    def __init__(self, reason: str, *, file: str | PathLike | None = None, key: str | None = None):
        self.file = None if file is None else str(file)
        self.key = key
        self.reason = reason
        where = [part for part in (self.file, None if key is None else f"key {key!r}") if part]
        super().__init__(": ".join([", ".join(where), reason]) if where else reason)


@dataclass(frozen=True)
class ModelConfig:
    """Options of the DAS3 model. The defaults reproduce the published release.

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
    """

    hand_weight: bool = False
    gh_rim_theta: float = math.radians(44.37)
    gh_rim_phi: float = math.radians(38.55)
    joint_k1: float = 1.0
    joint_k2: float = 5000.0
    joint_damping: float = 1.0
    muscle_model: str = "das3"
    shoulder_passive: str = "das3"
    strength: tuple[tuple[str, float], ...] = ()

    def __post_init__(self) -> None:
        for name in _FIELDS:
            reason = _check(name, getattr(self, name), in_file_units=False)
            if reason is not None:
                raise ConfigError(reason, key=name)


# Dataclass field -> (key in the TOML file, conversion from the file's unit; None = no conversion).
_FIELDS = {
    "hand_weight": ("hand_weight", None),
    "gh_rim_theta": ("gh_rim_theta_deg", math.radians),
    "gh_rim_phi": ("gh_rim_phi_deg", math.radians),
    "joint_k1": ("joint_k1", float),
    "joint_k2": ("joint_k2", float),
    "joint_damping": ("joint_damping", float),
    "muscle_model": ("muscle_model", None),
    "shoulder_passive": ("shoulder_passive", None),
    "strength": ("strength", lambda table: tuple((k, float(v)) for k, v in table.items())),
}
STRENGTH_MAX = 10.0
MUSCLE_MODEL_NAMES = ("das3", "thelen2003")
SHOULDER_PASSIVE_NAMES = ("das3", "das3+engin")
_FILE_KEYS = {key: name for name, (key, _) in _FIELDS.items()}


def _check(name: str, value: object, *, in_file_units: bool) -> str | None:
    """Why ``value`` is not valid for field ``name`` (in file or dataclass units), or None."""
    if name == "hand_weight":
        return None if isinstance(value, bool) else f"must be true or false, not {value!r}"
    if name == "muscle_model":
        return None if value in MUSCLE_MODEL_NAMES else f"must be one of {', '.join(MUSCLE_MODEL_NAMES)}, not {value!r}"
    if name == "shoulder_passive":
        return (None if value in SHOULDER_PASSIVE_NAMES
                else f"must be one of {', '.join(SHOULDER_PASSIVE_NAMES)}, not {value!r}")
    if name == "strength":
        return _check_strength(value, in_file_units)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"must be a number, not {value!r}"
    if not math.isfinite(value):
        return f"must be finite, not {value!r}"
    if name in ("gh_rim_theta", "gh_rim_phi"):
        hi, unit = (90.0, "degrees") if in_file_units else (math.pi / 2, "rad")
        if not 0.0 < value < hi:
            return f"must be strictly between 0 and {hi:g} {unit}, not {value!r}"
    elif value < 0.0:
        return f"must be >= 0, not {value!r}"
    return None


def _check_strength(value: object, in_file_units: bool) -> str | None:
    """Why a strength table (file: {name: factor}; dataclass: ((name, factor), ...)) is not valid, or None."""
    from sim.das3.model import muscle_element_names  # local: sim.das3.model builds on this module
    from sim.das3.muscle_groups import element_indices, unknown_muscle

    if in_file_units and not isinstance(value, dict):
        return "must be a table of muscle element or group -> factor on Fmax, e.g. {bicb = 0.5}"
    pairs = value.items() if in_file_units else value
    names = muscle_element_names()
    for key, factor in pairs:
        if element_indices(key, names) is None:
            return unknown_muscle(key, names)
        if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 0.0 < factor <= STRENGTH_MAX:
            return f"factor of {key!r} must be a number in (0, {STRENGTH_MAX:g}], not {factor!r}"
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


def load_model_config(path: str | PathLike) -> ModelConfig:
    """Read a model configuration TOML file (see ``configs/model.toml``).

    Every key of the ``[model]`` table is optional; missing keys keep the published defaults.

    Raises:
        ConfigError: the file cannot be read, is not UTF-8 or not TOML, or has an unknown table or key, a value of
            the wrong type, a non-finite value or a value out of range.
    """
    try:
        doc = tomllib.loads(read_input_file(path).decode("utf-8"))
    except InputFileError as exc:
        raise ConfigError(exc.reason, file=path) from None
    except OSError as exc:
        raise ConfigError(f"cannot read file: {exc.strerror or exc}", file=path) from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"invalid TOML: {exc}", file=path) from exc
    except UnicodeDecodeError as exc:     # tomllib decodes the whole file as UTF-8 first
        raise ConfigError(not_utf8(exc), file=path) from None

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
    for key, raw in section.items():
        if key not in _FILE_KEYS:
            raise ConfigError(unknown_name("key", key, _FILE_KEYS), file=file, key=prefix + key)
        name = _FILE_KEYS[key]
        reason = _check(name, raw, in_file_units=True)
        if reason is not None:
            raise ConfigError(reason, file=file, key=prefix + key)
        to_field = _FIELDS[name][1]
        values[name] = raw if to_field is None else to_field(raw)
    try:
        return ModelConfig(**values)
    except ConfigError as exc:  # only if a conversion rounds onto a bound
        raise ConfigError(exc.reason, file=file, key=prefix + _FIELDS[exc.key][0]) from None
