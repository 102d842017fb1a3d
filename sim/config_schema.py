"""Config schemas: each config table declares its keys once (:class:`Key`: the name as written in the file
with its unit suffix, kind, default, range or choices, conversion to SI and a one-line doc) in a
:class:`Section`. The reader (:class:`drivers.core.config_table.ConfigTable`), the config dataclasses'
defaults and the generated config reference (:func:`sections_markdown`) all come from that one declaration.

This module sits in ``sim`` so every layer can declare its tables with it (``[model]`` is read in ``sim``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

#: Default of a key that must be given.
REQUIRED = object()

#: Kinds of key: a finite number, an integer, true/false, a non-empty string, a list of strings, a table
#: (passed on), or any value (checked by the table's reader).
KINDS = ("number", "integer", "boolean", "string", "strings", "table", "value")

#: Unit of a key name's suffix (longest suffix first), for the reference.
UNIT_SUFFIXES = (("_deg_s", "deg/s"), ("_ms", "ms"), ("_us", "µs"), ("_deg", "deg"), ("_hz", "Hz"),
                 ("_ma", "mA"), ("_uc", "µC"), ("_s", "s"), ("_n", "N"))


def from_ms(value: float) -> float:
    """ms -> s: value / 1000."""
    return value / 1000.0


def from_milli(value: float) -> float:
    """milli -> SI: value * 1e-3 (the same number as :func:`from_ms` up to rounding)."""
    return value * 1e-3


def from_micro(value: float) -> float:
    """micro -> SI: value * 1e-6."""
    return value * 1e-6


def from_deg(value: float) -> float:
    """deg -> rad."""
    return math.radians(value)


@dataclass(frozen=True)
class Derived:
    """A default computed from the keys of the same table read before it (file units), e.g. one timeout
    at least another; ``text`` says how, for the reference."""

    text: str
    compute: Callable[[dict], object]


def unit_of(name: str) -> str:
    """The unit a key name's suffix labels ('' when it has none)."""
    return next((unit for suffix, unit in UNIT_SUFFIXES if name.endswith(suffix)), "")


@dataclass(frozen=True)
class Key:
    """One key of a config table. ``default`` is in file units (or :data:`REQUIRED`, or :class:`Derived`);
    ``to_si`` converts a file value to the dataclass field ``field`` (None: no conversion); ``lo``/``hi``
    bound a number or integer (``lo_exclusive``: lo itself is out; ``hi_exclusive`` only for a table read by its own
    checker, as ``[model]``; ``why`` explains the range in errors, or for a table what it holds)."""

    name: str
    kind: str
    default: object = None
    doc: str = ""
    lo: float = -math.inf
    hi: float = math.inf
    lo_exclusive: bool = False
    hi_exclusive: bool = False
    why: str = ""
    choices: tuple[str, ...] | None = None
    field: str = ""
    to_si: Callable | None = None
    unit: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"key {self.name!r}: unknown kind {self.kind!r}; valid: {', '.join(KINDS)}")
        if not self.field:
            object.__setattr__(self, "field", self.name)
        if self.unit is None:
            object.__setattr__(self, "unit", unit_of(self.name))

    def si(self, value):
        """A file value in the field's unit."""
        return value if self.to_si is None or value is None else self.to_si(value)

    @property
    def si_default(self):
        """The default in the field's unit (only for a plain default)."""
        if self.default is REQUIRED or isinstance(self.default, Derived):
            raise ValueError(f"key {self.name!r} has no plain default")
        return self.si(self.default)

    def range_text(self) -> str:
        """The valid values, for the reference: '[1, 10]', '(0, 100]', '>= 0', 'das3, mtg' or ''."""
        if self.choices is not None:
            return ", ".join(self.choices)
        if self.kind not in ("number", "integer") or (self.lo == -math.inf and self.hi == math.inf):
            return ""
        lo, hi = _number_text(self.lo), _number_text(self.hi)
        if self.hi == math.inf:
            return f"{'>' if self.lo_exclusive else '>='} {lo}"
        return f"{'(' if self.lo_exclusive else '['}{lo}, {hi}{')' if self.hi_exclusive else ']'}"

    def default_text(self) -> str:
        """The default as written in TOML, for the reference ('required', a derived default's text, 'none')."""
        if self.default is REQUIRED:
            return "required"
        if isinstance(self.default, Derived):
            return self.default.text
        if self.default is None:
            return "none"
        return f"`{toml_text(self.default)}`"


def _number_text(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def toml_text(value) -> str:
    """A value as TOML writes it: true, 4, 0.5, "das3", [0, 1], {}."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return _number_text(value)
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {toml_text(v)}" for k, v in value.items()) + "}"
    return str(value)


@dataclass(frozen=True)
class Section:
    """A config table's keys (``name`` as in the file: ``loop``, ``stimulation.channel``, ``driver (can)``);
    ``array``: the table is one of an array of tables (``[[stimulation.channel]]``)."""

    name: str
    doc: str
    keys: tuple[Key, ...]
    array: bool = False
    by_name: dict = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_name = {k.name: k for k in self.keys}
        if len(by_name) != len(self.keys):
            raise ValueError(f"section {self.name!r} declares a key twice")
        object.__setattr__(self, "by_name", by_name)

    def key(self, name: str) -> Key:
        return self.by_name[name]

    def default(self, field_name: str):
        """The SI default of the key that fills dataclass field ``field_name`` (for the dataclass's default)."""
        return next(k for k in self.keys if k.field == field_name).si_default

    def markdown(self) -> str:
        """The section's keys as a Markdown table (key, unit, default, range, doc)."""
        heading = f"[[{self.name}]]" if self.array else f"[{self.name}]"
        rows = [f"### `{heading}`", "", self.doc, "", "| key | unit | default | valid | description |",
                "|---|---|---|---|---|"]
        for k in self.keys:
            cells = (f"`{k.name}`", k.unit, k.default_text(), k.range_text(), k.doc)
            rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        return "\n".join(rows) + "\n"


def sections_markdown(sections, title: str = "Configuration reference") -> str:
    """Every section's table under one heading (the docs site's generated config reference)."""
    return "\n".join([f"## {title}", "", *(s.markdown() for s in sections)])
