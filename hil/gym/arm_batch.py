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

What is the same for every arm runs once per step for all of them (:mod:`hil.gym.batch_kernels`): the commands
of actions within the limits are latched in one compiled call, and after ticks that every arm ended well with an
ideal sensor, the arms' tick records are gathered in one call, from which the frames, the effort and the fatigue
check are read as arrays. Anything else (a command to clamp or reject, a failed step, a safety stop, a
measurement model) goes arm by arm through the engine, as a service run does.

An arm's episode ends when a safety action stops it, its plant diverges, or every channel's fibres collapse
(fatigue fitness below :data:`FIBRE_COLLAPSE`); it then takes no more ticks until it is reset.
"""
from __future__ import annotations

import math
import threading
import time

import numba
import numpy as np
from numba.typed import List

from drivers.controllers.policy_io import ActionLayout, ObservationLayout, action_layout
from hil.config import ServiceConfig, with_patient
from hil.gym.arguments import MAX_ENVS, ArgumentError, fixed_pulse, whole_number
from hil.gym.batch_kernels import gather_records, latch_checked_actions
from hil.gym.snapshot import EngineSnapshot
from hil.rt.plants import plant_type
from hil.rt.stimulation import common_pulse_limits
from hil.rt.tick_kernel import direct_call
from hil.service.build import build_tick_engine
from sim.plants import PlantDivergedError

FIBRE_COLLAPSE = 0.05
"""Fatigue fitness below which a channel's fibres count as collapsed (a *proposal*; :mod:`hil.rt.fatigue`)."""
POLICY_DRIVER = 0
"""The driver index the policy's commands carry."""
COLLAPSE_DETAIL = "every driven channel's fatigue fitness is below the collapse level"
"""The ``detail`` of an episode ended by fibre collapse."""
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
    """One engine with its snapshot (reset in place), the patient it was built for and why its episode ended
    (its status and tick are the batch's arrays)."""

    def __init__(self, cfg: ServiceConfig, patient_key) -> None:
        self.patient_key = patient_key
        self.model, self.engine = build_tick_engine(cfg)
        self.engine.warmup()
        self.snapshot = EngineSnapshot(self.engine)
        self.detail = ""

    def reset(self, noise_seed: int, hand_kg: float) -> None:
        self.snapshot.restore()
        sensor = self.engine.sensor
        sensor.rng = np.random.Generator(np.random.PCG64(noise_seed))
        if sensor.lab is not None:        # the lab sensors' own generator and IMU biases, from the same seed
            sensor.lab.seed = noise_seed
            sensor.lab.reset()
        self.engine.plant.set_load_vector(hand_loads(self.engine, hand_kg))
        self.detail = ""


class ArmBatch:
    """``n`` arms of config ``cfg`` whose policy drives the channels ``channel_names`` with actions of ``kind``
    every ``ticks_per_action`` ticks and observes ``observe`` plus ``n_target`` target values."""

    def __init__(self, cfg: ServiceConfig, n: int, channel_names, observe, n_target: int, ticks_per_action: int,
                 kind: str = "level", pulse_width_us: float = 300.0, frequency_hz: float = 40.0,
                 threads: int = 1) -> None:
        n = whole_number("num_envs", n, 1, MAX_ENVS)
        threads = whole_number("threads", threads, 1, MAX_ENVS)
        self.cfg, self.n, self.ticks_per_action, self.threads = cfg, n, ticks_per_action, threads
        self.arms = [Arm(cfg, None) for _ in range(n)]
        engine = self.arms[0].engine
        self.period_s = engine.period_s
        plant = plant_type(cfg.plant.type)
        self.batch_tick = plant.batch_tick_threaded if threads > 1 else plant.batch_tick   # one thread: no pool
        stim = engine.stim
        names = tuple(ch.name for ch in stim.channels) if stim is not None else ()
        limits = [(ch.max_pulse_width_us, ch.max_amplitude_ma, ch.min_frequency_hz, ch.max_frequency_hz)
                  for ch in stim.channels] if stim is not None else []
        self.actions: ActionLayout = action_layout(limits, names, tuple(channel_names), kind, pulse_width_us,
                                                   frequency_hz)
        if stim is not None:
            fixed_pulse(kind, common_pulse_limits([stim.channels[c] for c in self.actions.channels]), pulse_width_us,
                        frequency_hz)
        self.observation = ObservationLayout(observe, engine.sensor.dtype, self.arms[0].model.dof_names, n_target)
        self.frames = np.zeros(n, engine.sensor.dtype)
        self.status = np.full(n, RUNNING, np.int64)
        """Each arm's episode status (RUNNING, STOPPED, DIVERGED, COLLAPSED)."""
        self.ticks = np.zeros(n, np.int64)
        """Each arm's next tick (its ticks since its reset)."""
        self.records = np.zeros(n, engine.record.dtype)
        """The arms' tick records as of their last gathered step (:meth:`_finish_all`)."""
        self._max_amplitude_ma = np.array(self.actions.max_amplitude_ma)
        self._channel_index = np.array(self.actions.channels, np.int64)
        a = self.actions
        self._limits = np.column_stack([a.max_pulse_width_us, a.max_amplitude_ma, a.min_frequency_hz,
                                        a.max_frequency_hz]).astype(np.float64).reshape(-1, 4)
        self._single_pulses = all(0 in stim.channels[c].modes for c in self.actions.channels)
        self._stale = np.zeros(n, np.bool_)
        self._results = np.zeros((n, 5), np.int64)
        self.effort = np.zeros(n)
        self.compiled_s = 0.0
        """Wall seconds spent in the compiled batched ticks so far (what ``hil bench gym`` reports as compiled)."""
        self._relist()

    def _compile(self) -> None:
        """The batched tick's compiled overload for this batch, called directly (:func:`direct_call`); zero
        ticks run, so nothing changes."""
        args = (self._arrays, self._stale, self.ticks, 0, self.period_s, self._results)
        self.batch_tick(*args)
        self._call = direct_call(self.batch_tick, *args)

    def _relist(self) -> None:
        """The typed lists of the arms' compiled tick arguments and of the arrays the batch's bookkeeping writes
        and reads (again after an arm was rebuilt)."""
        if len({arm.engine.record.dtype for arm in self.arms}) > 1:
            raise ArgumentError("the arms of a batch must have the same layout (channels, fatigue, sensors)")
        engines = self._engines = [arm.engine for arm in self.arms]
        self._arrays = _typed([e.tick_arrays for e in engines])
        self._latched = _typed([e.latched for e in engines])
        self._latched_by = _typed([e.latched_by for e in engines])
        self._counters = _typed([e.counters.values for e in engines])
        self._watchdogs = _typed([e.watchdog.cells for e in engines])
        self._received_at = np.array([e.counters.received_at[POLICY_DRIVER] for e in engines], np.int64)
        self._record_bytes = _typed([e.record.view(np.uint8) for e in engines])
        self._records_u8 = self.records.view(np.uint8).reshape(self.n, -1)
        self._frames_u8 = self.frames.view(np.uint8).reshape(self.n, -1)
        self._frame_offset = self.records.dtype.fields["frame"][1]
        self._compile()
        self._each_tick = any(e.finishes_each_tick for e in engines)
        self._fatigue = engines[0].has_fatigue

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
        self.status[i], self.ticks[i] = RUNNING, 0
        self.frames[i] = arm.engine.record["frame"][0]
        lab, outputs = arm.engine.sensor.lab, arm.engine.plant.outputs
        if lab is not None:             # no tick yet: the lab sensors' reading of the initial state, not zeros
            lab.reading_before_start(outputs.q, outputs.qdot, self.frames[i:i + 1])
        self.effort[i] = 0.0

    # -- steps --------------------------------------------------------------------------------------------
    def command(self, i: int, action: np.ndarray) -> None:
        """Arm ``i``'s channel commands for ``action`` (at its next tick; through the engine's command path)."""
        engine = self.arms[i].engine
        engine.begin(int(self.ticks[i]))
        channel = engine.channel
        for c, pw, amp, freq in self.actions.commands(action):
            channel(POLICY_DRIVER, 0, c, pw, amp, freq, 0)

    def _command_all(self, running: np.ndarray, actions: np.ndarray) -> None:
        """The running arms' commands: the actions whose every command the engine would accept unchanged (finite,
        within the limits, mode 0 allowed) are latched in one call (:func:`latch_checked_actions`: latched, counted,
        the watchdog fed, as :meth:`TickEngine.channel` does), any other goes command by command through
        :meth:`TickEngine.channel` (clamped or rejected and counted there)."""
        if running.shape[0] == 0:
            return
        latched = np.zeros(running.shape[0], np.bool_)
        if self._single_pulses:
            latch_checked_actions(self._latched, self._latched_by, self._counters, self._watchdogs,
                                  self._received_at, running, self.actions.rows(actions[running]),
                                  self._channel_index, self._limits, self.ticks, POLICY_DRIVER, latched)
        for i in running[~latched].tolist():
            self.command(i, actions[i])

    def step(self, actions: np.ndarray, stepping: np.ndarray) -> None:
        """One action step of the running arms where ``stepping``: commands, then ``ticks_per_action`` ticks (all
        in one compiled call, or one call per tick where an engine must finish each tick in Python); the frames
        and ``effort``, the mean squared relative amplitude applied at the step's last tick, are updated, other
        arms keep theirs."""
        running = np.flatnonzero(stepping & (self.status == RUNNING))
        self._command_all(running, actions)
        if self.threads > 1:
            _use_threads(self.threads)
        if self._each_tick:
            for k in range(self.ticks_per_action):
                running = running[self.status[running] == RUNNING]
                self._run(running, 1, first=k == 0)
        else:
            self._run(running, self.ticks_per_action, first=True)
        if running.shape[0]:
            rows = self.rows(running)
            relative = self.records["applied"][rows][:, self._channel_index, 1] / self._max_amplitude_ma
            self.effort[rows] = (relative * relative).sum(axis=1) / relative.shape[1]

    def _run(self, running: np.ndarray, n_ticks: int, first: bool) -> None:
        """``n_ticks`` ticks of the arms ``running`` in one compiled call, then they book them."""
        if running.shape[0] == 0:
            return
        stale, engines = self._stale, self._engines
        for i in running.tolist():
            engine = engines[i]
            if not first:
                engine.begin(int(self.ticks[i]))
            stale[i] = engine.plant.begin_steps()
        if running.shape[0] == self.n:
            t0 = time.perf_counter()
            self._call(self._arrays, stale, self.ticks, n_ticks, self.period_s, self._results)
            self.compiled_s += time.perf_counter() - t0
        else:
            self._run_some(running, n_ticks)
        self._finish_all(running)

    def _run_some(self, running: np.ndarray, n_ticks: int) -> None:
        """The compiled ticks of some arms only (the others have ended their episode or are being reset)."""
        arrays = _typed([self.arms[i].engine.tick_arrays for i in running.tolist()])
        results = np.zeros((running.shape[0], self._results.shape[1]), np.int64)
        t0 = time.perf_counter()
        self.batch_tick(arrays, self._stale[running], self.ticks[running], n_ticks, self.period_s, results)
        self.compiled_s += time.perf_counter() - t0
        self._results[running] = results

    def _finish_all(self, running: np.ndarray) -> None:
        """The arms ``running`` book the ticks they ran, and their :attr:`records` are gathered. When every one
        ended well, with nothing to finish per tick (an ideal sensor, no extension rules): each plant books its
        steps, and the frames and the fatigue check come from the records; otherwise arm by arm
        (:meth:`_finish`)."""
        rows = self.rows(running)
        results = self._results[rows]
        if self._each_tick or results[:, 0::3].any():            # a plant status or a safety stop (columns 0, 3)
            for i in running.tolist():
                self._finish(i)
            self._gather(running)
            return
        engines, first_ticks = self._engines, self.ticks[rows].tolist()
        for i, n_clipped, n_done, n_ticks, tick in zip(running.tolist(), *results[:, [1, 2, 4]].T.tolist(), first_ticks):
            engine = engines[i]
            engine.plant.finish_steps(0, n_clipped, n_done, engine.u)
            engine.tick = tick + n_ticks - 1
        self.ticks[rows] += results[:, 4]
        self._gather(running, frames=True)
        if self._fatigue:
            fitness = self.records["fitness"][rows][:, self._channel_index]
            for i in running[fitness.max(axis=1) < FIBRE_COLLAPSE].tolist():
                self._end(i, COLLAPSED, COLLAPSE_DETAIL)

    def _finish(self, i: int) -> None:
        """Arm i books the ticks it ran (:meth:`TickEngine.finish`); its frame, and its status if it ended."""
        arm = self.arms[i]
        engine = arm.engine
        status, n_clipped, n_done, stop, n_ticks = self._results[i].tolist()
        engine.tick = int(self.ticks[i]) + n_ticks - 1
        try:
            result = engine.finish(status, n_clipped, n_done, stop)
        except PlantDivergedError as exc:
            self._end(i, DIVERGED, str(exc))
            return
        self.ticks[i] += n_ticks
        self.frames[i] = result.frame[0]
        if result.stop:
            self._end(i, STOPPED, engine.stop_detail or result.stop_reason)
        elif engine.has_fatigue and float(engine.fitness[self._channel_index].max()) < FIBRE_COLLAPSE:
            self._end(i, COLLAPSED, COLLAPSE_DETAIL)

    def rows(self, arms: np.ndarray) -> np.ndarray | slice:
        """An index of the sorted arm numbers ``arms``: every row as a slice when they are all the arms (a view, not
        the copy that indexing a structured array with an index array makes)."""
        return slice(None) if arms.shape[0] == self.n else arms

    def segment_model(self, i: int):
        """The DAS3 model of arm i's segments, of its patient's size (the MTG arm is built on them)."""
        return self.arms[i].model.segment_model

    def _end(self, i: int, status: int, detail: str) -> None:
        self.status[i], self.arms[i].detail = status, detail

    def _gather(self, arms: np.ndarray, frames: bool = False) -> None:
        """:attr:`records` of ``arms`` from their engines, and with ``frames`` their :attr:`frames` from the
        records (one compiled copy)."""
        gather_records(self._records_u8, self._record_bytes, arms, self._frames_u8,
                       self._frame_offset if frames else -1)

    def time_s(self) -> np.ndarray:
        return self.ticks * self.period_s


_THREADS_SET = threading.local()
"""The numba thread count a batch last set in this thread (``numba.get_num_threads`` costs microseconds a call)."""


def _use_threads(threads: int) -> None:
    """numba's thread count for this thread's next parallel call: ``threads``, at most numba's pool (a count set
    elsewhere in between is not seen; it changes the speed only, never a result: the arms are independent)."""
    threads = min(threads, numba.config.NUMBA_NUM_THREADS)
    if getattr(_THREADS_SET, "count", None) != threads:
        numba.set_num_threads(threads)
        _THREADS_SET.count = threads


def _typed(items: list) -> List:
    """A numba typed list of ``items``."""
    typed = List()
    for item in items:
        typed.append(item)
    return typed


def ticks_per_action(action_period_s: float, period_s: float) -> int:
    """Whole ticks nearest the action period (at least one)."""
    return max(1, int(math.floor(action_period_s / period_s + 0.5)))
