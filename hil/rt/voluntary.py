"""The patient's own movement (issue 37, item 6): a driver with ``role = "voluntary"`` drives the patient's
retained voluntary muscles, apart from the stimulation.

Such a driver's excitation commands (a plug-in's :class:`drivers.controllers.plugin.ExcitationCommand`, a
link's excitation records) are latched in the run's voluntary vector (one value per muscle element, zero-order
hold) and logged as ``KIND_VOLUNTARY`` (:mod:`drivers.core.contract`). Only the elements the patient's own drive
reaches take them (the model's ``voluntary_reach``: on the DAS3 arm the elements of groups whose patient state is
``voluntary``, :mod:`sim.patient`; on the MTG arm each actuator's voluntary share, :mod:`sim.mtg.patient`); a
command for another is rejected as ``not_voluntary``, a channel command as ``wrong_mode``. The source does not
feed the controller watchdog: the patient's silence is not a controller fault. A silent source's drive is held
(a person holding a posture sends nothing new); a lost source's drive goes to zero at the tick its loss is
handled (logged, so a replay does the same), as a lost controller's stimulation does.

The plant's excitation is u_plant = max(u_stim, reach u_voluntary) per element (:mod:`hil.rt.tick_kernel`;
reach 1 on every DAS3 element that takes the drive): a modelling choice (*proposal*) that takes the patient's own
drive and the stimulation as recruiting the same motor units, so the larger recruitment wins and neither adds to
the other. Safety zeroes the stimulation only;
a ``stop`` still ends the run. The plant's denervation gate applies to the sum as to the stimulation.
"""
from __future__ import annotations

import numpy as np

from sim.config_schema import Key, Section

ROLES = ("controller", "voluntary")
ROLE_SCHEMA = Section("driver (every type)", "Keys every `[[driver]]` table may set, whatever its type.", (
    Key("role", "string", "controller", "`controller`: its commands drive the stimulation (and feed the watchdog); "
        "`voluntary`: the patient's own movement, its excitation commands drive the patient's voluntary muscle "
        "groups apart from the stimulation (recorded as `u_voluntary`)", choices=ROLES),
), array=True)
ROLE_KEY = ROLE_SCHEMA.keys[0]


def driver_role(table: dict) -> str:
    """A ``[[driver]]`` table's role (validated by the service config)."""
    return table.get(ROLE_KEY.name, ROLE_KEY.default)


def without_role(table: dict) -> dict:
    """The table a driver's own ``parse_config`` reads: the common ``role`` key taken out."""
    return {k: v for k, v in table.items() if k != ROLE_KEY.name}


class VoluntaryLatch:
    """The run's latched voluntary drive, how much of each element it reaches (``reach``, the model's
    ``voluntary_reach``; the elements with reach > 0 take it) and which drivers send it. Without a voluntary driver
    its arrays are empty, which tells the compiled tick that there is no voluntary source."""

    def __init__(self, drivers: frozenset[int], reach: np.ndarray) -> None:
        self.drivers = frozenset(drivers)
        n = reach.shape[0] if self.drivers else 0
        self.reach = np.array(reach[:n], dtype=np.float64)
        self.accepts = self.reach > 0.0
        self.values = np.zeros(n)
        self.latched_by = np.full(n, -1, np.int64)

    @property
    def active(self) -> bool:
        """A voluntary source is configured (the record has ``u_voluntary``)."""
        return bool(self.drivers)

    def kernel_arrays(self, u_voluntary: np.ndarray | None) -> tuple:
        """(latched drive, its reach, the record's ``u_voluntary``, the plant's excitation) for the compiled tick;
        empty arrays without a source."""
        n = self.values.shape[0]
        return self.values, self.reach, (np.zeros(0) if u_voluntary is None else u_voluntary), np.zeros(n)

    def lose(self, driver: int) -> None:
        """A lost source: its latched drive goes to zero."""
        self.values[self.latched_by == driver] = 0.0
