"""The counters of a run, stored once: in the metrics block the exporter serves, or in a private block of
the same layout when metrics are off (replay, offline runs, tests). The tick engine and the safety
functions increment them in place through preresolved indices, and the run's result reads them back:
there is no second copy to keep in step."""
from __future__ import annotations

import numpy as np

from drivers.core.contract import REJECT_REASONS
from hil.safety import table
from hil.telemetry.metrics import MetricsBlock, MetricsSchema, default_schema

#: drivers a private counter set has room for when the caller does not name them
ANONYMOUS_DRIVERS = 8


class RunCounters:
    """Counts by driver (commands received), by driver and reason (rejected, clamped), per driver (transport
    failures), and the safety rules' counts (one counter per rule of :mod:`hil.safety.table` that counts, read
    as an attribute named by the rule's ``count_field``, e.g. ``watchdog_trips``)."""

    def __init__(self, block: MetricsBlock, driver_names: list[str]) -> None:
        self.block, self.values = block, block.values
        self.driver_names = tuple(driver_names)
        self.code = {r: i for i, r in enumerate(REJECT_REASONS)}
        at = self._index
        self.received_at = np.array([at("hil_commands_received_total", driver=d) for d in driver_names], np.int64)
        self.failures_at = np.array([at("hil_driver_failures_total", driver=d) for d in driver_names], np.int64)
        self.rejected_at = np.array([[at("hil_commands_rejected_total", driver=d, reason=r) for r in REJECT_REASONS]
                                     for d in driver_names], np.int64)
        self.clamped_at = np.array([[at("hil_commands_clamped_total", driver=d, reason=r) for r in REJECT_REASONS]
                                    for d in driver_names], np.int64)
        self._cells, self._received_cells = memoryview(self.values), self.received_at.tolist()   # Python views
        self.safety = {r.count_field: block.counter(r.counter.name) for r in table.counted_rules()}

    def __getattr__(self, name: str):
        safety = self.__dict__.get("safety", {})
        if name not in safety:
            raise AttributeError(name)
        return safety[name]

    def safety_cell(self, count_field: str):
        """The counter of a rule's ``count_field`` (None: the rule counts nothing)."""
        return self.safety.get(count_field) if count_field else None

    @classmethod
    def private(cls, driver_names: list[str] | None = None) -> "RunCounters":
        """Counters in this process only (``ANONYMOUS_DRIVERS`` drivers unless named)."""
        names = driver_names or [str(i) for i in range(ANONYMOUS_DRIVERS)]
        return cls(MetricsBlock.private(MetricsSchema(default_schema(names, list(REJECT_REASONS)))), names)

    def _index(self, name: str, **labels) -> int:
        return self.block.counter(name, **labels).i

    # -- counting (in the tick: one array store each) ---------------------------------------------------
    def received(self, driver: int) -> None:
        self._cells[self._received_cells[driver]] += 1.0

    def rejected(self, driver: int, reason: str, count: int = 1) -> None:
        self.values[self.rejected_at[driver, self.code[reason]]] += count

    def clamped(self, driver: int, reason: str) -> None:
        self.values[self.clamped_at[driver, self.code[reason]]] += 1.0

    def driver_failed(self, driver: int) -> None:
        self.values[self.failures_at[driver]] += 1.0

    # -- reading (after the run, reports, tests) --------------------------------------------------------
    def received_by_driver(self) -> dict[int, int]:
        return {d: int(self.values[i]) for d, i in enumerate(self.received_at) if self.values[i]}

    def by_reason(self, which: str) -> dict[tuple[int, str], int]:
        """{(driver, reason): count} of the non-zero ``rejected`` or ``clamped`` counters."""
        at = self.rejected_at if which == "rejected" else self.clamped_at
        counts = self.values[at]
        return {(int(d), REJECT_REASONS[r]): int(counts[d, r]) for d, r in zip(*np.nonzero(counts))}
