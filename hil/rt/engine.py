"""The deterministic part of a HIL tick: latch commands, apply safety, map stimulation, step the plant.

:class:`TickEngine` is what both the real-time loop (:mod:`hil.rt.loop`) and the offline replay drive. It
reads no clock: every decision depends on the tick index, the commands handed to it (as a
:class:`drivers.core.interface.CommandSink`) and the plant state, so the same config and the same recorded inputs
give bit-identical sensor frames.

Tick k applies the commands latched during tick k over [k T, (k+1) T] (zero-order hold; N plant
sub-steps of T/N) and its frame reports the state at t = (k+1) T.
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass

import numpy as np

from drivers.core.contract import (
    COMMAND_DTYPE,
    KIND_CHANNEL,
    KIND_DRIVER_LOST,
    KIND_EXCITATION,
    KIND_HEARTBEAT,
    KIND_REJECTS,
    KIND_VOLUNTARY,
)
from hil.rt.plants import plant_type
from hil.rt.sensor import ELBOW, SensorModel
from hil.rt.stimulation import no_delay_line, no_fatigue, no_stimulation_params
from hil.rt.tick_kernel import direct_call, tick_arrays
from hil.rt.voluntary import VoluntaryLatch
from hil.safety.functions import SafetyFunctions
from hil.safety.table import SafetyConfig
from hil.telemetry.counters import RunCounters
from sim.plants import FixedStepPlant

#: Command-log entries per tick when the builder does not size the log from its drivers.
DEFAULT_LOG_CAPACITY = 4096
COMMAND_ENTRY = struct.Struct("<qqHBBh4d")
"""One command-log entry as COMMAND_DTYPE lays it out (little-endian, packed)."""


def tick_dtype(n_channels: int, n_muscles: int, frame: np.dtype, fatigue: bool = False,
               voluntary: bool = False) -> np.dtype:
    """The per-tick record of a run (recorded every tick; the recording's ``ticks`` stream); runs with a
    fatigue model add each channel's fitness (:mod:`hil.rt.fatigue`) before the frame, runs with a voluntary
    source the patient's own drive (:mod:`hil.rt.voluntary`) after ``u``."""
    fitness = [("fitness", "<f8", (max(n_channels, 1),))] if fatigue else []
    own = [("u_voluntary", "<f8", (n_muscles,))] if voluntary else []
    return np.dtype([
        ("tick", "<i8"),
        ("deadline_ns", "<i8"),     # CLOCK_MONOTONIC
        ("start_ns", "<i8"),
        ("lateness_ns", "<i8"),     # start - deadline
        ("compute_ns", "<i8"),      # engine step (safety, stimulation, plant sub-steps, sensors)
        ("tick_ns", "<i8"),         # whole tick body
        ("skipped_deadlines", "<i8"),
        ("commands_unrecorded", "<i8"),   # this tick's command-log entries missing from the commands stream
        ("applied", "<f8", (max(n_channels, 1), 4)),  # pw us, amp mA, freq Hz, mode, after safety
        ("u", "<f8", (n_muscles,)),  # applied excitations (the stimulation's)
        *own,
        *fitness,
        ("frame", frame),
    ])


@dataclass(frozen=True)
class TickResult:
    frame: np.ndarray   # 1-element sensor frame (view, valid until the next tick)
    stop: bool          # a 'stop' safety action ended the run
    stop_reason: str


class TickEngine:
    """Latch + safety + stimulation model + plant (+ sensor model), one call per tick.

    The engine's applied channels, excitations, fitness and sensor frame live in its tick record
    (``record``, :func:`tick_dtype`), where the compiled tick writes them: the record needs no copy of
    them (:class:`hil.rt.tick.TickBody` fills its other fields)."""

    def __init__(self, plant: FixedStepPlant, stimulation, safety: SafetyConfig, sensor: SensorModel,
                 period_s: float, substeps: int, reject_reasons: tuple[str, ...],
                 group_index: dict[str, np.ndarray] | None = None,
                 log_capacity: int = DEFAULT_LOG_CAPACITY, counters: RunCounters | None = None,
                 voluntary: VoluntaryLatch | None = None) -> None:
        if substeps < 1 or not math.isclose(plant.step_s * substeps, period_s, rel_tol=1e-12):
            raise ValueError("plant step x substeps must equal the loop period")
        self.plant = plant
        self.stim = stimulation                  # hil.rt.stimulation.StimulationModel or None (direct)
        self.sensor = sensor
        self.period_s = period_s
        self.substeps = substeps
        self.n_channels = 0 if stimulation is None else stimulation.n_channels
        self.reasons = reject_reasons
        self.reason_code = {r: i + 1 for i, r in enumerate(reject_reasons)}
        self.groups = group_index or {}
        n_mus = plant.model.n_muscles
        stim_params = no_stimulation_params(n_mus) if stimulation is None else stimulation.kernel_params
        self.emd = no_delay_line() if stimulation is None else stimulation.delay_line(period_s)
        self.voluntary_drive = voluntary if voluntary is not None else VoluntaryLatch(frozenset(), np.zeros(n_mus))
        self.voluntary_drivers = self.voluntary_drive.drivers
        self._group_code = {g: -1 - i for i, g in enumerate(self.groups)}
        self._own_record(n_mus, no_fatigue() if stimulation is None else stimulation.fatigue_state(period_s))
        sensor.bind_run(plant.model, stimulation, self.applied, self.fatigue[2], period_s)
        # latched commands (zero-order hold); what was applied this tick is in the record
        self.latched = np.zeros((self.n_channels, 4))   # pw us, amp mA, freq Hz, mode (0/1/2 pulses-1)
        self.direct = np.zeros(n_mus)
        self.latched_by = np.full(self.n_channels, -1, np.int64)   # driver whose command is latched
        # the same memory as flat Python views: a command's stores without a numpy scalar each
        self._latched_cells, self._latched_by_cells = memoryview(self.latched.reshape(-1)), memoryview(self.latched_by)
        self.direct_by = np.full(n_mus, -1, np.int64)
        # the run's counters (stored once: the metrics block, or a private one) and the safety functions
        self.counters = counters if counters is not None else RunCounters.private()
        self.safety = SafetyFunctions(safety, plant, period_s, self.counters)   # every rule of hil.safety.table
        self.watchdog = self.safety.watchdog     # fed by every accepted command
        self._extension_rules = bool(self.safety.extensions)
        # per-tick command log (recorded; sized by the builder for its drivers' worst case) and counters
        self.log = np.zeros(max(1, log_capacity), COMMAND_DTYPE)
        self.n_log = 0
        self.unlogged_tick = 0     # this tick's commands that did not fit the log (see _record)
        self.drivers_lost: dict[int, int] = {}     # driver -> tick its loss took effect
        self.tick = 0
        self.overrun = False
        self.stop_detail = ""      # why a safety action ended the run
        self._compute_tick = self._compiled_tick = plant_type(plant.model.kind).tick   # hil.rt.plants
        self._running = TickResult(frame=sensor.true_frame, stop=False, stop_reason="")   # reused by most ticks
        self._tick_arrays = tick_arrays(plant, self.latched, self.direct, self.applied, self.u, stim_params,
                                        self.emd, self.fatigue, stimulation is not None,
                                        self.safety.tick_rules,
                                        sensor.frame_views, sensor.status_view, substeps,
                                        self.voluntary_drive.kernel_arrays(self.u_voluntary), sensor.lab_arrays)

    def _own_record(self, n_muscles: int, fatigue: tuple) -> None:
        """The tick record, and the applied channels, excitations, fitness and sensor frame as views of it."""
        has_fatigue = fatigue[0].shape[0] > 0
        has_voluntary = self.voluntary_drive.active
        self.record = np.zeros(1, tick_dtype(self.n_channels, n_muscles, self.sensor.dtype, has_fatigue, has_voluntary))
        self.applied = self.record["applied"][0, :self.n_channels]
        self.u = self.record["u"][0]
        self.u_voluntary = self.record["u_voluntary"][0] if has_voluntary else None
        if has_fatigue:
            fitness = self.record["fitness"][0, :self.n_channels]
            fitness[:] = fatigue[2]
            fatigue = (fatigue[0], fatigue[1], fitness, fatigue[3])
        self.fatigue = fatigue
        self.sensor.use_frame(self.record["frame"])

    @property
    def elbow_flexion_rad(self) -> float:
        """The plant's elbow flexion (ELx) now: the figure the run's progress and summary show."""
        return float(self.plant.outputs.q[ELBOW])

    @property
    def has_fatigue(self) -> bool:
        """The stimulation model has a fatigue state (:mod:`hil.rt.fatigue`)."""
        return self.fatigue[0].shape[0] > 0

    @property
    def fitness(self) -> np.ndarray:
        """(n_channels,) each channel's fatigue fitness this tick (1 without fatigue; :mod:`hil.rt.fatigue`)."""
        return self.fatigue[2]

    @property
    def log(self) -> np.ndarray:
        """This tick's command log (COMMAND_DTYPE; the first ``n_log`` entries are this tick's)."""
        return self._log

    @log.setter
    def log(self, entries: np.ndarray) -> None:
        self._log = entries
        self._log_bytes = memoryview(entries.view(np.uint8))

    # -- CommandSink --------------------------------------------------------------------------
    def _record(self, driver: int, receive_ns: int, kind: int, status: int, index: int,
                v0: float = 0.0, v1: float = 0.0, v2: float = 0.0, v3: float = 0.0) -> None:
        n = self.n_log
        if n >= self._log.shape[0]:   # cannot happen with a log sized for the drivers; counted
            self.unlogged_tick += 1
            return
        try:        # packed in place: a numpy item assignment converts every field through numpy scalars
            COMMAND_ENTRY.pack_into(self._log_bytes, n * COMMAND_ENTRY.size, self.tick, receive_ns, driver, kind,
                                    status, index, v0, v1, v2, v3)
        except (struct.error, TypeError, ValueError, OverflowError):
            # a value the packer refuses (e.g. an index beyond int16) is numpy's to convert or refuse, as before
            self._log[n] = (self.tick, receive_ns, driver, kind, status, index, (v0, v1, v2, v3))
        self.n_log = n + 1

    def size_log(self, drivers) -> None:
        """Size the command log for the worst case of these drivers (before the run: allocates)."""
        largest = max((len(g) for g in self.groups.values()), default=1)
        self.log = np.zeros(max(1, sum(d.max_log_entries(largest) for d in drivers)), COMMAND_DTYPE)

    @property
    def received(self) -> dict[int, int]:
        """Commands accepted, by driver (read from the counters; not for the tick)."""
        return self.counters.received_by_driver()

    @property
    def rejected(self) -> dict[tuple[int, str], int]:
        """Commands not applied, by (driver, reason)."""
        return self.counters.by_reason("rejected")

    @property
    def clamped(self) -> dict[tuple[int, str], int]:
        """Commands applied clamped to the limits, by (driver, reason)."""
        return self.counters.by_reason("clamped")

    def channel(self, driver: int, receive_ns: int, channel: int, pulse_width_us: float,
                amplitude_ma: float, frequency_hz: float, mode: int) -> bool:
        if driver in self.voluntary_drivers:     # the patient's own input drives muscles, not channels
            return self._reject_cmd(driver, receive_ns, KIND_CHANNEL, channel, "wrong_mode", pulse_width_us,
                                    amplitude_ma, frequency_hz, mode)
        if self.stim is None or not 0 <= channel < self.n_channels:
            return self._reject_cmd(driver, receive_ns, KIND_CHANNEL, channel,
                                    "unknown_channel", pulse_width_us, amplitude_ma, frequency_hz, mode)
        values, reason = self.stim.check_command(channel, pulse_width_us, amplitude_ma, frequency_hz, mode)
        if reason is not None and values is None:
            return self._reject_cmd(driver, receive_ns, KIND_CHANNEL, channel, reason,
                                    pulse_width_us, amplitude_ma, frequency_hz, mode)
        cells, row = self._latched_cells, 4 * channel
        cells[row], cells[row + 1], cells[row + 2], cells[row + 3] = values
        self._latched_by_cells[channel] = driver
        status = 0 if reason is None else self.reason_code.get(reason, 255)
        if reason is not None:     # clamped: applied within the limits, counted; the log keeps the request
            self.counters.clamped(driver, reason)
        self._record(driver, receive_ns, KIND_CHANNEL, status, channel, pulse_width_us, amplitude_ma,
                     frequency_hz, mode)
        self._accept(driver)
        return True

    def excitation(self, driver: int, receive_ns: int, muscle: int, value: float) -> bool:
        if driver in self.voluntary_drivers:
            return self.voluntary(driver, receive_ns, muscle, value)
        if self.stim is not None:    # channel mode: excitations come from the stimulation model only
            return self._reject_cmd(driver, receive_ns, KIND_EXCITATION, muscle, "wrong_mode", value)
        if not 0 <= muscle < self.direct.shape[0]:
            return self._reject_cmd(driver, receive_ns, KIND_EXCITATION, muscle, "unknown_muscle", value)
        if not math.isfinite(value):
            return self._reject_cmd(driver, receive_ns, KIND_EXCITATION, muscle, "non_finite", value)
        clipped = min(1.0, max(0.0, value))
        if clipped != value:       # applied clipped to [0, 1], counted; the log keeps the request
            self.counters.clamped(driver, "excitation_clipped")
        self.direct[muscle] = clipped
        self.direct_by[muscle] = driver
        self._record(driver, receive_ns, KIND_EXCITATION, 0, muscle, value)
        self._accept(driver)
        return True

    def group_excitation(self, driver: int, receive_ns: int, group: str, value: float) -> bool:
        if driver in self.voluntary_drivers:
            return self.group_voluntary(driver, receive_ns, group, value)
        if self.stim is not None:    # one rejection for the command, not one per element
            return self._reject_cmd(driver, receive_ns, KIND_EXCITATION, -1, "wrong_mode", value)
        members = self.groups.get(group)
        if members is None:
            return self._reject_cmd(driver, receive_ns, KIND_EXCITATION, -1, "unknown_muscle", value)
        ok = True
        for m in members:
            ok = self.excitation(driver, receive_ns, int(m), value) and ok
        return ok

    def voluntary(self, driver: int, receive_ns: int, muscle: int, value: float) -> bool:
        """The patient's own drive of a muscle element (:mod:`hil.rt.voluntary`): latched apart from the
        stimulation, logged as KIND_VOLUNTARY; no sign of life for the controller watchdog."""
        drive = self.voluntary_drive
        if not 0 <= muscle < self.direct.shape[0]:
            return self._reject_cmd(driver, receive_ns, KIND_VOLUNTARY, muscle, "unknown_muscle", value)
        if not math.isfinite(value):
            return self._reject_cmd(driver, receive_ns, KIND_VOLUNTARY, muscle, "non_finite", value)
        if muscle >= drive.accepts.shape[0] or not drive.accepts[muscle]:
            return self._reject_cmd(driver, receive_ns, KIND_VOLUNTARY, muscle, "not_voluntary", value)
        clipped = min(1.0, max(0.0, value))
        if clipped != value:
            self.counters.clamped(driver, "excitation_clipped")
        drive.values[muscle] = clipped
        drive.latched_by[muscle] = driver
        self._record(driver, receive_ns, KIND_VOLUNTARY, 0, muscle, value)
        self.counters.received(driver)
        return True

    def group_voluntary(self, driver: int, receive_ns: int, group: str, value: float) -> bool:
        """:meth:`voluntary` for each element of ``group``; a group the patient does not control is rejected
        once (``not_voluntary``, index -1 - the group's position)."""
        members = self.groups.get(group)
        if members is None:
            return self._reject_cmd(driver, receive_ns, KIND_VOLUNTARY, -1, "unknown_muscle", value)
        accepts = self.voluntary_drive.accepts
        if accepts.shape[0] == 0 or not accepts[members].all():
            return self._reject_cmd(driver, receive_ns, KIND_VOLUNTARY, self._group_code[group], "not_voluntary",
                                    value)
        ok = True
        for m in members:
            ok = self.voluntary(driver, receive_ns, int(m), value) and ok
        return ok

    def heartbeat(self, driver: int, receive_ns: int) -> None:
        self._record(driver, receive_ns, KIND_HEARTBEAT, 0, -1)
        if driver in self.voluntary_drivers:
            self.counters.received(driver)
        else:
            self._accept(driver)

    def reject(self, driver: int, receive_ns: int, reason: str) -> None:
        self._reject_cmd(driver, receive_ns, 0, -1, reason)

    def rejects(self, driver: int, receive_ns: int, reason: str, count: int) -> None:
        """``count`` frames the transport rejected for ``reason`` since the driver's last report: one
        log entry (kind KIND_REJECTS, values[0] = count) and one counter update, whatever the count."""
        self.counters.rejected(driver, reason, count)
        self._record(driver, receive_ns, KIND_REJECTS, self.reason_code.get(reason, 255), -1, float(count))

    def driver_lost(self, driver: int, receive_ns: int) -> None:
        """The driver's transport died: what it latched goes to zero now (logged, so replay does the same)."""
        self.latched[self.latched_by == driver] = 0.0
        self.direct[self.direct_by == driver] = 0.0
        self.voluntary_drive.lose(driver)
        if driver not in self.drivers_lost:
            self.drivers_lost[driver] = self.tick
            self.counters.driver_failed(driver)
        self._record(driver, receive_ns, KIND_DRIVER_LOST, 0, -1)

    def _reject_cmd(self, driver, receive_ns, kind, index, reason, v0=0.0, v1=0.0, v2=0.0, v3=0.0):
        self.counters.rejected(driver, reason)
        code = self.reason_code.get(reason, 255)
        self._record(driver, receive_ns, kind, code, index, v0, v1, v2, v3)
        return False

    def _accept(self, driver: int) -> None:
        """A command of ``driver`` accepted: counted as received, and the watchdog fed at this tick (what
        :func:`hil.gym.batch_kernels.latch_checked_actions` does for a batch's actions)."""
        self.counters.received(driver)
        self.watchdog.feed(self.tick)

    def warmup(self) -> None:
        """Compile (or load from numba's cache) and run the tick's kernel without changing any state: a
        tick with zero stimulation, after which the plant (:meth:`sim.plants.FixedStepPlant.warmup`) and the engine's
        applied channels and excitations are restored. Later ticks call the compiled overload directly."""
        live = (self.applied, self.u, self.emd[0], self.emd[2], self.fatigue[0], self.fatigue[2],
                *(() if self.u_voluntary is None else (self.u_voluntary,)))
        saved = [a.copy() for a in live]
        self.plant.warmup(lambda: self._compiled_tick(self._tick_arrays, self.plant.begin_steps(), 0, 0.0, False, True))
        for array, copy in zip(live, saved):
            array[...] = copy
        self._compute_tick = direct_call(self._compiled_tick, self._tick_arrays, False, 0, 0.0, False, False)

    # -- the tick ----------------------------------------------------------------------------
    def begin(self, tick: int, overrun: bool = False) -> None:
        """Start tick ``tick``: drivers hand their commands to this sink after this call."""
        self.tick = tick
        self.n_log = 0
        self.unlogged_tick = 0
        self.overrun = overrun

    def step(self) -> TickResult:
        """Safety, stimulation -> excitation, plant sub-steps, sensor frame (the compiled tick, then what
        raises or has no fixed size: a failed step, the measurement model, a stop's message)."""
        tick = self.tick
        plant_status, n_clipped, n_done, stop = self._compute_tick(
            self._tick_arrays, self.plant.begin_steps(), tick, (tick + 1) * self.period_s, self.overrun, False)
        return self.finish(plant_status, n_clipped, n_done, stop)

    @property
    def finishes_each_tick(self) -> bool:
        """Whether :meth:`finish` must run after every tick (extension rules or a measurement model act per
        tick); otherwise a batched caller may run several ticks and book them at once."""
        return self._extension_rules or not self.sensor.ideal

    @property
    def tick_arrays(self):
        """The compiled tick's arguments (:func:`hil.rt.tick_kernel.tick_arrays`): what a batched caller
        (:mod:`hil.rt.batch`) hands to the plant type's tick for this engine."""
        return self._tick_arrays

    def finish(self, plant_status: int, n_clipped: int, n_done: int, stop: int) -> TickResult:
        """The tick after its compiled part returned (plant status, excitations clipped, steps done, STOP_*
        code): book the plant's steps (raises as :meth:`sim.plants.FixedStepPlant.finish_steps` says), the
        extension rules, the measurement model, the result."""
        tick = self.tick
        self.plant.finish_steps(plant_status, n_clipped, n_done, self.u)
        if self._extension_rules:
            by_extension = self.safety.after_step(self.sensor.status_view)
            stop = stop or by_extension
        frame = self.sensor.true_frame if self.sensor.ideal else self.sensor.complete(tick)
        if stop:
            return self._stopping(frame, stop)
        if frame is not self._running.frame:     # a delayed sensor's frame
            return TickResult(frame=frame, stop=False, stop_reason="")
        return self._running

    def _stopping(self, frame: np.ndarray, code: int) -> TickResult:
        """The result of a tick whose safety action (STOP_* ``code``) ends the run, and what the operator is
        told (once)."""
        reason, self.stop_detail = self.safety.stopped_by(code)
        return TickResult(frame=frame, stop=True, stop_reason=reason)

    def __getattr__(self, name: str):
        """A safety rule's state by its name in :mod:`hil.safety.table` (e.g. ``engine.gh``)."""
        safety = self.__dict__.get("safety")
        if safety is None or name not in safety.states:
            raise AttributeError(name)
        return safety.states[name]
