"""N virtual arms stepped together: the tick engines of a task's config, their actions through the same command
path as any controller's, their compiled ticks in one call, their frames gathered for the observation.

Each arm is a :class:`hil.rt.engine.TickEngine` built from the config (stimulation model and limits, fatigue,
safety rules, sensor model, patient) exactly as a service run builds it; the policy is its one controller
(driver 0). Per action step, for every arm: the channel commands of its action (as :meth:`TickEngine.channel`
takes them: limits, limit policy, counters, watchdog), then ``ticks_per_action`` ticks of all arms in one call of
the plant type's batched tick (:mod:`hil.rt.plants`, numba threads across the arms; one call per tick where an
engine must finish each tick in Python), after which each engine books its ticks (:meth:`TickEngine.finish`:
plant status, extension rules, measurement model). A single environment is a batch of one, so a batch's arm i
follows the single environment's trajectory bit for bit.

An arm's episode ends when a safety action stops it, its plant diverges, or every channel's fibres collapse
(fatigue fitness below :data:`FIBRE_COLLAPSE`); it then takes no more ticks until it is reset.
"""
from __future__ import annotations

import math
import time

import numba
import numpy as np
from numba.typed import List

from drivers.controllers.policy_io import ActionLayout, ObservationLayout, action_layout
from hil.config import ServiceConfig, with_patient
from hil.gym.snapshot import EngineSnapshot
from hil.rt.plants import plant_type
from hil.rt.tick_kernel import direct_call
from hil.service.build import build_tick_engine
from sim.plants import PlantDivergedError

FIBRE_COLLAPSE = 0.05
"""Fatigue fitness below which a channel's fibres count as collapsed (a *proposal*; :mod:`hil.rt.fatigue`)."""
POLICY_DRIVER = 0
"""The driver index the policy's commands carry."""
RUNNING, STOPPED, DIVERGED, COLLAPSED = range(4)
ENDINGS = ("running", "safety_stop", "divergence", "fibre_collapse")
"""Why an arm's episode ended (``info["termination"]``), by code."""


def hand_loads(engine, kg: float) -> np.ndarray:
    """The plant's load vector with a weight of ``kg`` hanging from the hand (thorax frame, gravity of the
    model's data) and every other load zero."""
    names = engine.plant.model.load_names
    loads = np.zeros(len(names))
    for axis, g in zip("xyz", engine.plant.model.arrays.gravity):
        loads[names.index(f"hand_force_{axis}")] = kg * g
    return loads


class Arm:
    """One engine with its snapshot (reset in place), its episode status and the patient it was built for."""

    def __init__(self, cfg: ServiceConfig, patient_key) -> None:
        self.patient_key = patient_key
        self.model, self.engine = build_tick_engine(cfg)
        self.engine.warmup()
        self.snapshot = EngineSnapshot(self.engine)
        self.status = RUNNING
        self.tick = 0
        self.detail = ""

    def reset(self, noise_seed: int, hand_kg: float) -> None:
        self.snapshot.restore()
        sensor = self.engine.sensor
        sensor.rng = np.random.Generator(np.random.PCG64(noise_seed))
        if sensor.lab is not None:        # the lab sensors' own generator and IMU biases, from the same seed
            sensor.lab.seed = noise_seed
            sensor.lab.reset()
        self.engine.plant.set_load_vector(hand_loads(self.engine, hand_kg))
        self.status, self.tick, self.detail = RUNNING, 0, ""


class ArmBatch:
    """``n`` arms of config ``cfg`` whose policy drives the channels ``channel_names`` with actions of ``kind``
    every ``ticks_per_action`` ticks and observes ``observe`` plus ``n_target`` target values."""

    def __init__(self, cfg: ServiceConfig, n: int, channel_names, observe, n_target: int, ticks_per_action: int,
                 kind: str = "level", pulse_width_us: float = 300.0, frequency_hz: float = 40.0,
                 threads: int = 1) -> None:
        if n < 1:
            raise ValueError("a batch has at least one arm")
        self.cfg, self.n, self.ticks_per_action, self.threads = cfg, n, ticks_per_action, max(1, threads)
        self.arms = [Arm(cfg, None) for _ in range(n)]
        engine = self.arms[0].engine
        self.period_s = engine.period_s
        self.batch_tick = plant_type(cfg.plant.type).batch_tick
        stim = engine.stim
        names = tuple(ch.name for ch in stim.channels) if stim is not None else ()
        limits = [(ch.max_pulse_width_us, ch.max_amplitude_ma, ch.min_frequency_hz, ch.max_frequency_hz)
                  for ch in stim.channels] if stim is not None else []
        self.actions: ActionLayout = action_layout(limits, names, tuple(channel_names), kind, pulse_width_us,
                                                   frequency_hz)
        self.observation = ObservationLayout(observe, engine.sensor.dtype, self.arms[0].model.dof_names, n_target)
        self.frames = np.zeros(n, engine.sensor.dtype)
        self._max_amplitude_ma = np.array(self.actions.max_amplitude_ma)
        self._channel_index = np.array(self.actions.channels, np.int64)
        self._single_pulses = all(0 in stim.channels[c].modes for c in self.actions.channels)
        self._stale, self._ticks = np.zeros(n, np.bool_), np.zeros(n, np.int64)
        self._results = np.zeros((n, 5), np.int64)
        self.effort = np.zeros(n)
        self.compiled_s = 0.0
        """Wall seconds spent in the compiled batched ticks so far (what ``hil bench gym`` reports as compiled)."""
        self._relist()

    def _compile(self) -> None:
        """The batched tick's compiled overload for this batch, called directly (:func:`direct_call`); zero
        ticks run, so nothing changes."""
        args = (self._arrays, self._stale, self._ticks, 0, self.period_s, self._results)
        self.batch_tick(*args)
        self._call = direct_call(self.batch_tick, *args)

    def _relist(self) -> None:
        """The typed list of the arms' compiled tick arguments (again after an arm was rebuilt)."""
        arrays = List()
        for arm in self.arms:
            arrays.append(arm.engine.tick_arrays)
        self._arrays = arrays
        self._compile()
        self._each_tick = any(arm.engine.finishes_each_tick for arm in self.arms)
        if len({arm.engine.record.dtype for arm in self.arms}) > 1:
            raise ValueError("the arms of a batch must have the same layout (channels, fatigue, sensors)")

    # -- episodes ----------------------------------------------------------------------------------------
    def reset_arm(self, i: int, noise_seed: int, hand_kg: float = 0.0, patient: dict | None = None,
                  patient_key=None) -> None:
        """Arm ``i`` back to its initial state (rebuilt first when it is to be another patient)."""
        arm = self.arms[i]
        if patient_key != arm.patient_key:
            cfg = self.cfg if patient is None else with_patient(self.cfg, patient)
            arm = self.arms[i] = Arm(cfg, patient_key)
            self._relist()
        arm.reset(noise_seed, hand_kg)
        self.frames[i] = arm.engine.record["frame"][0]
        self.effort[i] = 0.0

    # -- steps --------------------------------------------------------------------------------------------
    def command(self, i: int, action: np.ndarray) -> None:
        """Arm ``i``'s channel commands for ``action`` (at its next tick; through the engine's command path)."""
        arm = self.arms[i]
        engine = arm.engine
        engine.begin(arm.tick)
        channel = engine.channel
        for c, pw, amp, freq in self.actions.commands(action):
            channel(POLICY_DRIVER, 0, c, pw, amp, freq, 0)

    def _command_all(self, running: list[int], actions: np.ndarray) -> None:
        """The running arms' commands: an action whose every command the engine would accept unchanged (finite,
        within the limits, mode 0 allowed) is latched at once (:meth:`TickEngine.latch_checked`), any other goes
        command by command through :meth:`TickEngine.channel` (clamped or rejected and counted there)."""
        rows = self.actions.rows(actions[running])
        fast = self.actions.within(rows) & self._single_pulses
        channels = self._channel_index
        for j, i in enumerate(running):
            if fast[j]:
                arm = self.arms[i]
                arm.engine.begin(arm.tick)
                arm.engine.latch_checked(POLICY_DRIVER, channels, rows[j])
            else:
                self.command(i, actions[i])

    def step(self, actions: np.ndarray, stepping: np.ndarray) -> None:
        """One action step of the running arms where ``stepping``: commands, then ``ticks_per_action`` ticks (all
        in one compiled call, or one call per tick where an engine must finish each tick in Python); the frames
        and ``effort``, the mean squared relative amplitude applied at the step's last tick, are updated, other
        arms keep theirs."""
        arms = self.arms
        running = [i for i in range(self.n) if stepping[i] and arms[i].status == RUNNING]
        self._command_all(running, actions)
        if self.threads != numba.get_num_threads():
            numba.set_num_threads(min(self.threads, numba.config.NUMBA_NUM_THREADS))
        if self._each_tick:
            for k in range(self.ticks_per_action):
                running = [i for i in running if arms[i].status == RUNNING]
                self._run(running, 1, first=k == 0)
        else:
            self._run(running, self.ticks_per_action, first=True)
        if running:
            amplitudes = np.array([arms[i].engine.applied[self._channel_index, 1] for i in running])
            relative = amplitudes / self._max_amplitude_ma
            self.effort[running] = (relative * relative).sum(axis=1) / relative.shape[1]

    def _run(self, running: list[int], n_ticks: int, first: bool) -> None:
        """``n_ticks`` ticks of the arms ``running`` in one compiled call, then each engine books them."""
        if not running:
            return
        arms, stale, ticks = self.arms, self._stale, self._ticks
        for i in running:
            arm = arms[i]
            if not first:
                arm.engine.begin(arm.tick)
            stale[i] = arm.engine.plant.begin_steps()
            ticks[i] = arm.tick
        if len(running) == self.n:
            t0 = time.perf_counter()
            self._call(self._arrays, stale, ticks, n_ticks, self.period_s, self._results)
            self.compiled_s += time.perf_counter() - t0
        else:
            self._run_some(running, n_ticks)
        for i in running:
            self._finish(i)

    def _run_some(self, running: list[int], n_ticks: int) -> None:
        """The compiled ticks of some arms only (the others have ended their episode or are being reset)."""
        arrays = List()
        for i in running:
            arrays.append(self.arms[i].engine.tick_arrays)
        idx = np.array(running)
        results = np.zeros((len(running), self._results.shape[1]), np.int64)
        t0 = time.perf_counter()
        self.batch_tick(arrays, self._stale[idx], self._ticks[idx], n_ticks, self.period_s, results)
        self.compiled_s += time.perf_counter() - t0
        self._results[idx] = results

    def _finish(self, i: int) -> None:
        """Arm i books the ticks it ran (:meth:`TickEngine.finish`); its frame, and its status if it ended."""
        arm = self.arms[i]
        engine = arm.engine
        status, n_clipped, n_done, stop, n_ticks = self._results[i].tolist()
        engine.tick = arm.tick + n_ticks - 1
        try:
            result = engine.finish(status, n_clipped, n_done, stop)
        except PlantDivergedError as exc:
            arm.status, arm.detail = DIVERGED, str(exc)
            return
        arm.tick += n_ticks
        self.frames[i] = result.frame[0]
        if result.stop:
            arm.status, arm.detail = STOPPED, engine.stop_detail or result.stop_reason
        elif engine.has_fatigue and float(engine.fitness[self._channel_index].max()) < FIBRE_COLLAPSE:
            arm.status, arm.detail = COLLAPSED, "every driven channel's fatigue fitness is below the collapse level"

    def statuses(self) -> np.ndarray:
        return np.array([arm.status for arm in self.arms])

    def time_s(self) -> np.ndarray:
        return np.array([arm.tick * self.period_s for arm in self.arms])


def ticks_per_action(action_period_s: float, period_s: float) -> int:
    """Whole ticks nearest the action period (at least one)."""
    return max(1, int(math.floor(action_period_s / period_s + 0.5)))
