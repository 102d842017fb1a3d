"""The safety functions of one run, made from the table (:mod:`hil.safety.table`): each rule's state, what the
compiled tick takes (:func:`hil.safety.rules.tick_rules`), the extension rules' classification of a frame after
the compiled tick, and which rule a STOP_* code names."""
from __future__ import annotations

import numpy as np

from drivers.core.contract import STATUS_STOPPING
from hil.safety import table
from hil.safety.production import GH_MONITOR, RANGE_OF_MOTION, WATCHDOG
from hil.safety.rules import STOP_NONE, STOP_ROM, extension_rows, tick_rules


class SafetyFunctions:
    """One state object per rule the tick evaluates (``states``, by rule name), made by the rule's entry with
    its config, the plant, the period and its counter cell (``counters.safety_cell``)."""

    def __init__(self, cfg: table.SafetyConfig, plant, period_s: float, counters) -> None:
        self.plant = plant
        self.states = {r.name: r.make(cfg, plant, period_s, counters.safety_cell(r.count_field))
                       for r in table.rules() if r.make is not None}
        self.extensions = tuple((r, self.states[r.name]) for r in table.extension_rules())
        self.by_code = {r.stop_code: r for r in table.rules() if r.stop_code}
        for code, (r, _) in enumerate(self.extensions, STOP_ROM + 1):
            self.by_code[code] = r
        self._first_extension_code = STOP_ROM + 1
        self._alarm_bits = [table.status_bit(r.bits[0][0]) for r, _ in self.extensions]
        zeroed = [table.status_bit(r.bits[1][0]) if len(r.bits) > 1 else 0 for r, _ in self.extensions]
        rows = extension_rows([state for _, state in self.extensions], zeroed)
        self.watchdog = self.states[WATCHDOG.name]
        self.tick_rules = tick_rules(self.watchdog, self.states[GH_MONITOR.name], self.states[RANGE_OF_MOTION.name],
                                     plant.model.has_glenohumeral, rows)

    def after_step(self, status: np.ndarray) -> int:
        """Classify the new frame by the extension rules (after the compiled tick, which set the frame's
        status word ``status[0]``): their alarm bits, the stop bit; the STOP_* code of the first that stops."""
        if not self.extensions:
            return STOP_NONE
        out = self.plant.outputs
        stop, bits = STOP_NONE, int(status[0])
        for k, (_, alarm) in enumerate(self.extensions):
            if alarm.observe(out.q, out.qdot, out.gh_stability) and stop == STOP_NONE:
                stop = self._first_extension_code + k
            if alarm.alarm:
                bits |= self._alarm_bits[k]
        status[0] = bits | (STATUS_STOPPING if stop != STOP_NONE else 0)
        return stop

    def stopped_by(self, code: int) -> tuple[str, str]:
        """(stop reason, why, for the operator) of a STOP_* code (after a stop; not for the tick)."""
        rule = self.by_code[code]
        state = self.states[rule.name]
        why = rule.explain(state, self.plant) if rule.explain is not None else rule.doc
        return rule.stop_reason, why

    def counts(self) -> dict[str, int]:
        """{rule's count field: count} of the rules that count (the run's result)."""
        return {r.count_field: int(self.states[r.name].counter.value) for r in table.counted_rules()
                if r.name in self.states}

    def __getitem__(self, name: str):
        return self.states[name]
