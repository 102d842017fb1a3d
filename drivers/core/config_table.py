"""Typed, range-checked reading of one TOML table of a service config (``[loop]``, ``[[driver]]``, ...):
the one checker every config table goes through, so every error names the file, the full key and the
reason, and an unknown key (a typo) is never silently replaced by a default."""
from __future__ import annotations

import difflib
import math
from os import PathLike

from sim.config_schema import REQUIRED, Derived, Key, Section
from sim.das3.config import ConfigError, unknown_name

__all__ = ["REQUIRED", "ConfigTable"]


def _range_text(lo: float, hi: float, lo_exclusive: bool) -> str:
    if hi == math.inf:
        return "a finite number" if lo == -math.inf else f"a finite number {'>' if lo_exclusive else '>='} {lo:g}"
    return f"a finite number in {'(' if lo_exclusive else '['}{lo:g}, {hi:g}]"


class ConfigTable:
    """Typed, range-checked access to one TOML table whose key path is ``name`` (e.g. ``loop`` or
    ``driver[1]``): every getter marks its key as known, :meth:`done` rejects the others, and every
    error names the file, the full key and the reason."""

    def __init__(self, values, name: str, file: str | PathLike | None) -> None:
        if not isinstance(values, dict):
            raise ConfigError("must be a table", file=file, key=name)
        self.values, self.name, self.file = values, name, file
        self.used: set[str] = set()

    @classmethod
    def section(cls, doc: dict, name: str, file) -> "ConfigTable":
        """The (optional) table ``name`` of a document."""
        return cls(doc.get(name, {}), name, file)

    def error(self, key: str, reason: str) -> ConfigError:
        return ConfigError(reason, file=self.file, key=f"{self.name}.{key}")

    def get(self, key: str, default=None):
        """The raw value (marks ``key`` as known); ``default=REQUIRED`` makes a missing key an error."""
        self.used.add(key)
        value = self.values.get(key, default)
        if value is REQUIRED:
            close = difflib.get_close_matches(key, [k for k in self.values if k not in self.used], n=1)
            raise self.error(key, "is required" + (f" (found {close[0]!r})" if close else ""))
        return value

    def number(self, key: str, default, lo: float = -math.inf, hi: float = math.inf,
               lo_exclusive: bool = False, why: str = "") -> float:
        """A finite number in [lo, hi] (or (lo, hi]); ``why`` explains the range in the error."""
        v = self.get(key, default)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise self.error(key, f"must be a number, not {v!r}")
        if not math.isfinite(v) or not lo <= v <= hi or (lo_exclusive and v == lo):
            raise self.error(key, f"must be {_range_text(lo, hi, lo_exclusive)}, not {v!r}" + (f" ({why})" if why else ""))
        return float(v)

    def integer(self, key: str, default, lo: int, hi: int):
        """An integer in [lo, hi] (None if the default is None and the key is absent)."""
        v = self.get(key, default)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise self.error(key, f"must be an integer in [{lo}, {hi}], not {v!r}")
        return v

    def boolean(self, key: str, default) -> bool:
        v = self.get(key, default)
        if not isinstance(v, bool):
            raise self.error(key, f"must be true or false, not {v!r}")
        return v

    def string(self, key: str, default, choices=None) -> str:
        v = self.get(key, default)
        if not isinstance(v, str) or not v:
            raise self.error(key, f"must be a non-empty string, not {v!r}")
        if choices is not None and v not in choices:
            raise self.error(key, f"must be one of {', '.join(choices)}, not {v!r}")
        return v

    def strings(self, key: str, default, choices=None) -> tuple[str, ...]:
        """A list of strings, each one of ``choices`` when given."""
        v = self.get(key, default)
        if not isinstance(v, (list, tuple)) or not all(isinstance(s, str) for s in v):
            raise self.error(key, f"must be a list of strings, not {v!r}")
        bad = [s for s in v if choices is not None and s not in choices]
        if bad:
            raise self.error(key, f"unknown entries {bad}; valid: {', '.join(choices)}")
        return tuple(v)

    def table(self, key: str, what: str) -> dict:
        """A sub-table passed on as keyword arguments (``what`` says to whom, for the error)."""
        v = self.get(key, {})
        if not isinstance(v, dict):
            raise self.error(key, f"must be a table of {what}")
        return v

    def key(self, key: Key, read: dict | None = None, default=None):
        """The value of a schema key in file units; ``read`` holds the keys read before it (for a derived
        default); ``default`` replaces a derived default the schema cannot compute (a channel's position)."""
        if isinstance(key.default, Derived):
            default = key.default.compute(read or {}) if default is None else default
        else:
            default = key.default
        if key.kind == "number":
            return self.number(key.name, default, key.lo, key.hi, key.lo_exclusive, key.why)
        if key.kind == "integer":
            return self.integer(key.name, default, key.lo, key.hi)
        if key.kind == "boolean":
            return self.boolean(key.name, default)
        if key.kind == "string":
            return self.string(key.name, default, key.choices)
        if key.kind == "strings":
            return self.strings(key.name, default, key.choices)
        if key.kind == "table":
            return self.table(key.name, key.why)
        return self.get(key.name, default)

    def read(self, section: Section) -> dict:
        """Every key of ``section``, in its order, as {dataclass field: value in SI}; :meth:`done` is left to
        the caller (a table may hold keys read elsewhere)."""
        read: dict = {}
        for key in section.keys:
            read[key.name] = self.key(key, read)
        return {key.field: key.si(read[key.name]) for key in section.keys}

    def build(self, section: Section, make):
        """``make(**fields)`` from every key of ``section``, then :meth:`done`."""
        made = make(**self.read(section))
        self.done()
        return made

    def done(self) -> None:
        """Reject keys no getter asked for."""
        for key in self.values:
            if key not in self.used:
                raise self.error(key, unknown_name("key", key, self.used))
