"""What a run of ``hil run`` / ``hil serve`` reports: one typed record, made by the real-time process,
completed by the supervisor, printed by the command line (``--json`` prints :meth:`RunResult.to_dict`)."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np

from hil.safety import table
from sim.errors import UserInputError


@dataclass
class RunResult:
    ok: bool
    error: str = ""                      # why the run failed (ok False)
    config_error: bool = False           # the failure was caused by the user's input (exit 2)
    traceback: str = ""
    ticks: int = 0
    stopped_by: str = ""                 # hil.safety.table.stop_reasons()
    stop_detail: str = ""
    deadline_misses: int = 0
    skipped_deadlines: int = 0
    late_over_1ms: int = 0
    cpu_s: float = 0.0
    wall_s: float = 0.0
    lateness_us: dict = field(default_factory=dict)      # p50, p99, p99.9, max
    compute_us: dict = field(default_factory=dict)       # the engine's step per tick: p50, p99, p99.9, max
    tick_phases_us: dict = field(default_factory=dict)   # median of each phase of a tick (hil.rt.loop.TIMING_COLUMNS)
    realtime: dict = field(default_factory=dict)         # sched_fifo, mlock, affinity, warnings
    safety_counts: dict = field(default_factory=dict)    # each counting safety rule's count_field -> count
    clipped_excitations: int = 0
    commands_received: int = 0
    commands_rejected: dict = field(default_factory=dict)   # "driver:reason" -> n
    commands_clamped: dict = field(default_factory=dict)
    commands_unrecorded: int = 0
    final_elbow_deg: float = math.nan
    drivers: dict = field(default_factory=dict)            # "index:type" -> the driver's statistics
    drivers_lost: list = field(default_factory=list)
    recording: str | None = None
    recording_failure: str = ""
    records_dropped: dict = field(default_factory=dict)
    records_unwritten: dict = field(default_factory=dict)
    problems: list = field(default_factory=list)           # one line each for the operator (exit 5)
    exporter_restarts: int = 0
    exporter_deaths: int = 0
    stalls: list = field(default_factory=list)     # the loop stopped ticking: tick, duration_s, timeout_s, killed

    @classmethod
    def failed(cls, exc: BaseException, tb: str) -> "RunResult":
        """A run that did not finish; ``config_error`` when the user's input caused it (not a bug)."""
        return cls(ok=False, error=f"{type(exc).__name__}: {exc}", config_error=isinstance(exc, UserInputError),
                   traceback=tb)

    def to_dict(self) -> dict:
        """The ``--json`` summary: every field of a finished run; ok, error and the traceback of a failed one."""
        if not self.ok:
            stall = {"stopped_by": self.stopped_by, "stalls": self.stalls} if self.stalls else {}
            return {"ok": False, "error": self.error, "config_error": self.config_error, "traceback": self.traceback,
                    **stall}
        doc = {}
        for f in dataclasses.fields(self):
            if f.name == "safety_counts":       # one key per rule, where the rules' counts always were
                doc.update({field_name: self.safety_counts.get(field_name, 0) for field_name in _count_fields()})
            elif f.name not in ("error", "config_error", "traceback"):
                doc[f.name] = getattr(self, f.name)
        return doc

    def __getattr__(self, name: str):
        """A safety rule's count by its ``count_field`` (e.g. ``watchdog_trips``; 0 when not counted)."""
        if name.startswith("_") or name not in _count_fields():
            raise AttributeError(name)
        return self.__dict__.get("safety_counts", {}).get(name, 0)

    @property
    def safety_stop(self) -> bool:
        """A safety rule's ``stop`` ended the run (exit status 4)."""
        return self.stopped_by in table.safety_stop_reasons()


def _count_fields() -> tuple[str, ...]:
    return tuple(r.count_field for r in table.counted_rules())


def percentiles_us(values_s: np.ndarray | None) -> dict:
    """p50, p99, p99.9 and max of per-tick durations, µs ({} without ticks)."""
    if values_s is None or not values_s.size:
        return {}
    return {"p50": float(np.percentile(values_s, 50) * 1e6), "p99": float(np.percentile(values_s, 99) * 1e6),
            "p99.9": float(np.percentile(values_s, 99.9) * 1e6), "max": float(values_s.max() * 1e6)}
