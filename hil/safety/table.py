"""The safety rules as one table: each rule declares its ``[safety]`` config keys, its status bits, the series
it counts in, its stop reason and how its state is made for a run. The config parser, the metrics schema, the
run's counters and result, the supervisor and the command line read this table instead of naming rules.

The production rules are entered by :mod:`hil.safety.production`; an extension rule (:func:`register`) brings
its alarm kernel and is evaluated per frame after the compiled tick (:mod:`hil.safety.functions`).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from enum import StrEnum
from typing import Callable

from drivers.core.contract import STATUS_BITS
from sim.config_schema import Derived, Key, Section

#: Status bits the loop itself sets, not a rule (the overrun of the previous tick, the stop of a run).
LOOP_STATUS_BITS = ("overrun", "stopping")

#: Bits of the frame's status word (``<u4``).
STATUS_WORD_BITS = 32


class StopReason(StrEnum):
    """Why a run ended: a run's ``stopped_by``. A safety rule's stop is its entry's ``stop_reason``."""

    DURATION = "duration"
    SIGNAL = "signal"
    RECORDING_FAILED = "recording_failed"
    PARENT_DIED = "parent_died"
    GH_UNSTABLE = "gh_unstable"
    RANGE_OF_MOTION = "range_of_motion"
    TICK_STALL = "tick_stall"


#: Stop reasons that are not a safety rule's: the run ended as asked, or could not go on.
RUN_STOP_REASONS = (StopReason.DURATION, StopReason.SIGNAL, StopReason.RECORDING_FAILED, StopReason.PARENT_DIED)


@dataclass(frozen=True)
class Series:
    """A metric series a rule owns (``kind`` counter or gauge; no labels)."""

    name: str
    kind: str
    help: str


@dataclass(frozen=True)
class SafetyRule:
    """One safety rule. ``bits``: its status bits (name, meaning); ``series``: its metrics, the first one
    the counter the tick counts in when ``count_field`` (its name in a run's result; ``count_label`` in the
    run's summary) is set; ``stop_reason``:
    the run's ``stopped_by`` when it ends a run; ``make(cfg, ctx, count)``: its state for a run (None: the
    rule runs elsewhere, e.g. in the supervisor); ``stop_code``: the compiled tick's STOP_* code (production
    rules; an extension gets one in :mod:`hil.safety.functions`); ``explain(state, outputs, model)``: why it
    stopped, for the operator; ``alarm``: an extension's compiled test of a frame."""

    name: str
    doc: str
    keys: tuple[Key, ...] = ()
    bits: tuple[tuple[str, str], ...] = ()
    series: tuple[Series, ...] = ()
    count_field: str = ""
    count_label: str = ""
    stop_reason: str = ""
    make: Callable | None = None
    stop_code: int = 0
    explain: Callable | None = None
    alarm: Callable | None = None

    @property
    def counter(self) -> Series | None:
        """The counter the tick counts in (None: the rule counts nothing per tick)."""
        return self.series[0] if self.count_field else None


_RULES: dict[str, SafetyRule] = {}


def register(rule: SafetyRule) -> SafetyRule:
    """Add a rule to the table (its name, keys, bits, series and stop reason must be new)."""
    _check_new(rule)
    _RULES[rule.name] = rule
    return rule


def unregister(name: str) -> None:
    """Remove a rule (an extension's test cleaning up)."""
    _RULES.pop(name, None)


@contextlib.contextmanager
def registered(rule: SafetyRule):
    """The table with ``rule`` in it for the ``with`` block."""
    register(rule)
    try:
        yield rule
    finally:
        unregister(rule.name)


def _check_new(rule: SafetyRule) -> None:
    taken = {
        "rule": set(_RULES),
        "key": {k.name for r in _RULES.values() for k in r.keys},
        "status bit": {b for r in _RULES.values() for b, _ in r.bits} | set(LOOP_STATUS_BITS)
        | (set(status_bit_names()) if rule.alarm is not None else set()),
        "series": {s.name for r in _RULES.values() for s in r.series},
        "stop reason": {r.stop_reason for r in _RULES.values()} | set(RUN_STOP_REASONS),
    }
    mine = {"rule": {rule.name}, "key": {k.name for k in rule.keys}, "status bit": {b for b, _ in rule.bits},
            "series": {s.name for s in rule.series}, "stop reason": {rule.stop_reason} - {""}}
    for what, names in mine.items():
        if names & taken[what]:
            raise ValueError(f"safety rule {rule.name!r}: {what} {sorted(names & taken[what])} is taken")
    if rule.alarm is None and not {b for b, _ in rule.bits} <= {b for b, _ in STATUS_BITS}:
        raise ValueError(f"safety rule {rule.name!r}: a compiled rule's status bits are the contract's")
    if rule.alarm is not None and len(status_bit_names()) + len(rule.bits) > STATUS_WORD_BITS:
        raise ValueError(f"safety rule {rule.name!r}: the status word has {STATUS_WORD_BITS} bits")


def rules() -> tuple[SafetyRule, ...]:
    """Every rule, production rules first, in the order they were entered."""
    return tuple(_RULES.values())


def extension_rules() -> tuple[SafetyRule, ...]:
    """The rules evaluated after the compiled tick (those with an ``alarm`` kernel)."""
    return tuple(r for r in _RULES.values() if r.alarm is not None)


# -- what the rest of the loop reads ------------------------------------------------------------------------
def section() -> Section:
    """The ``[safety]`` config table: every rule's keys, in table order (one default per key)."""
    return Section("safety", "The safety functions of the loop (docs: Safety); each key belongs to one rule.",
                   tuple(k for r in _RULES.values() for k in r.keys))


def status_bit_names() -> tuple[str, ...]:
    """The frame's status bits, bit i = 1 << i: the contract's (recorded, append-only), then the extensions'."""
    contract = tuple(name for name, _ in STATUS_BITS)
    return contract + tuple(b for r in extension_rules() for b, _ in r.bits if b not in contract)


def status_bit(name: str) -> int:
    """The mask of a status bit (1 << its index)."""
    return 1 << status_bit_names().index(name)


def metric_series() -> tuple[Series, ...]:
    """Every rule's metric series, in table order."""
    return tuple(s for r in _RULES.values() for s in r.series)


def counted_rules() -> tuple[SafetyRule, ...]:
    """Rules whose counter the tick counts in (their ``count_field`` is a field of the run's result)."""
    return tuple(r for r in _RULES.values() if r.count_field)


def stop_reasons() -> tuple[str, ...]:
    """Every ``stopped_by`` a run can report: the StopReason members, then the extensions' stops."""
    fixed = tuple(StopReason)
    return fixed + tuple(r.stop_reason for r in _RULES.values() if r.stop_reason and r.stop_reason not in fixed)


def safety_stop_reasons() -> tuple[str, ...]:
    """The ``stopped_by`` of a run ended by a safety rule (exit status 4)."""
    return tuple(r.stop_reason for r in _RULES.values() if r.stop_reason)


def rules_markdown() -> str:
    """The rules as a Markdown table (rule, keys, status bits, series, stop reason): the docs' safety reference."""
    rows = ["| rule | keys | status bits | series | stop reason | what |", "|---|---|---|---|---|---|"]
    for r in _RULES.values():
        cells = (r.name, ", ".join(f"`{k.name}`" for k in r.keys), ", ".join(f"`{b}`" for b, _ in r.bits) or "—",
                 ", ".join(f"`{s.name}`" for s in r.series) or "—", f"`{r.stop_reason}`" if r.stop_reason else "—",
                 r.doc)
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(rows) + "\n"


class SafetyConfig:
    """The ``[safety]`` values in SI units, one per key of the table (field name = the key's ``field``);
    a value not given is the key's default (a derived default from the other keys' defaults)."""

    def __init__(self, **values) -> None:
        defaults = _defaults()
        unknown = set(values) - set(defaults)
        if unknown:
            raise TypeError(f"SafetyConfig: unknown field(s) {', '.join(sorted(unknown))}")
        object.__setattr__(self, "_values", {**defaults, **values})

    def __getattr__(self, name: str):
        values = self.__dict__.get("_values", {})
        if name.startswith("_") or name not in values:
            raise AttributeError(name)
        return values[name]

    def __setattr__(self, name: str, value) -> None:
        raise AttributeError("SafetyConfig is frozen")

    def __eq__(self, other) -> bool:
        return isinstance(other, SafetyConfig) and self._values == other._values

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._values.items())))

    def __repr__(self) -> str:
        return "SafetyConfig(" + ", ".join(f"{k}={v!r}" for k, v in self._values.items()) + ")"

    def as_dict(self) -> dict:
        return dict(self._values)


def _defaults() -> dict:
    """Every field's SI default: the section read from an empty table."""
    from_file: dict = {}
    for key in section().keys:
        default = key.default
        from_file[key.name] = default.compute(from_file) if isinstance(default, Derived) else default
    return {key.field: key.si(from_file[key.name]) for key in section().keys}
