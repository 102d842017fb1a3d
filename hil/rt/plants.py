"""Plant types: each plant is registered here once, and the config, the service, the tick engine and the report
ask this registry instead of naming plants.

A :class:`PlantType` is a name (``[plant] type``), its model class and the model loader from the service config,
the plant's constructor (a :class:`sim.plants.FixedStepPlant`), its compiled tick, and its capabilities: what
the model class declares (``has_glenohumeral``, ``load_names``; :mod:`sim.plants`), its own ``[plant]`` keys
and its config checks. The compiled tick is one numba entry written with the public pieces of
:mod:`hil.rt.tick_kernel`::

    plant, n_steps, u, bits = tick_inputs(arrays, tick, warm)
    status, n_clipped, n_done = <the plant's step kernel>(<its kernel_args unpacked>, u, ..., n_steps)
    return status, n_clipped, n_done, tick_outputs(arrays, tick, time_s, n_done == n_steps, bits, overrun, warm)

A plant type's batched tick (``batch_tick``) runs ``n_ticks`` compiled ticks of each of N engines of the same
layout in one call (:mod:`hil.gym.arm_batch`): each engine's tick is the same compiled code on its own arrays, so
each trajectory is the single engine's bit for bit, whichever thread runs it. ``batch_tick_threaded`` shares the
engines among numba's threads; the one-thread batch does not use it, so a process that runs batches on one
thread starts no thread pool (a pool costs a launch per call, and numba's GNU OpenMP pool does not survive a
fork: a forked worker, Gymnasium's ``AsyncVectorEnv``'s, aborts on its first parallel call).

This is the one place in ``hil`` that names a plant's step kernel (``STEP_KERNEL`` of its ``sim`` package).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

import numpy as np
from numba import njit, prange

from drivers.core.contract import GLENOHUMERAL_FIELDS
from hil.rt.tick_kernel import tick_inputs, tick_outputs
from sim.config_schema import Key, Section
from sim.das3.model import Das3Model, load_model
from sim.das3.plant import STEP_KERNEL as DAS3_STEPS
from sim.das3.plant import Plant
from sim.jit.bundle import borrowed_items
from sim.jit.kernel import entry, kernel
from sim.mtg.model import MtgModel, mtg_model_for
from sim.mtg.plant import STEP_KERNEL as MTG_STEPS
from sim.mtg.plant import MtgPlant


@dataclass(frozen=True)
class PlantType:
    """One plant. ``model_class``: its model's class (``kind`` is the name); ``load_model(cfg)``: its model from
    the service config; ``make_plant(model, cfg, step_s, initial_state)``: the plant (``initial_state`` None: the
    model's resting state); ``tick``: its compiled tick (``tick(arrays, stale, tick, time_s, overrun, warm)`` ->
    (plant status, excitations clipped, steps done, STOP_* code)); ``batch_tick``: several ticks of N engines
    (:func:`das3_ticks`), ``batch_tick_threaded`` the same on numba's threads; ``options``: the ``[plant]`` keys
    only it reads (``cfg.plant.options``), ``file_options`` those of them that name files; ``check(cfg_plant, cfg_model)``:
    (key, reason) of a config it cannot run, or None."""

    name: str
    doc: str
    model_class: type
    load_model: Callable
    make_plant: Callable
    tick: Callable
    batch_tick: Callable | None = None
    batch_tick_threaded: Callable | None = None
    options: Section | None = None
    file_options: tuple[str, ...] = ()
    check: Callable | None = None

    @property
    def has_glenohumeral(self) -> bool:
        """The GH joint force and its stability are modelled (the GH rules and the glenoid figure apply)."""
        return bool(self.model_class.has_glenohumeral)

    @property
    def unmodelled_fields(self) -> tuple[str, ...]:
        """The sensor frame's fields this plant does not model (NaN in every frame)."""
        return () if self.has_glenohumeral else GLENOHUMERAL_FIELDS


_REGISTRY: dict[str, PlantType] = {}


def register_plant(plant: PlantType) -> PlantType:
    """Add a plant type (its name must be new); returns it."""
    if plant.name in _REGISTRY:
        raise ValueError(f"plant type {plant.name!r} is registered already")
    if plant.model_class.kind != plant.name:
        raise ValueError(f"plant type {plant.name!r}: its model class says kind {plant.model_class.kind!r}")
    _REGISTRY[plant.name] = plant
    return plant


def unregister_plant(name: str) -> None:
    """Remove a plant type (a test's toy plant)."""
    del _REGISTRY[name]


def plant_names() -> tuple[str, ...]:
    """The registered plant types, in registration order (``[plant] type``'s choices)."""
    return tuple(_REGISTRY)


def plant_type(name: str) -> PlantType:
    """The registered plant type ``name`` (a validated config names one)."""
    return _REGISTRY[name]


def plant_sections() -> list[Section]:
    """The plant types' own ``[plant]`` keys, one section each (for the config reference)."""
    return [p.options for p in _REGISTRY.values() if p.options is not None]


def option_keys() -> dict[str, tuple[Key, str]]:
    """Every plant type's own ``[plant]`` key by name: (its schema key, the first type that declares it)."""
    keys: dict[str, tuple[Key, str]] = {}
    for p in _REGISTRY.values():
        for key in () if p.options is None else p.options.keys:
            keys.setdefault(key.name, (key, p.name))
    return keys


def file_option_names() -> tuple[str, ...]:
    """The ``[plant]`` keys of every plant type that name files (relative to the config that sets them)."""
    return tuple(dict.fromkeys(k for p in _REGISTRY.values() for k in p.file_options))


def option_files(cfg_plant) -> dict[str, str]:
    """The files the plant of ``cfg_plant`` (a PlantConfig) reads by option, as ``plant.<key>`` -> the name as
    written (options left at their default name none)."""
    p = plant_type(cfg_plant.type)
    return {f"plant.{k}": cfg_plant.options[k] for k in p.file_options
            if cfg_plant.options[k] != p.options.key(k).default}


def config_file(cfg, name: str) -> str:
    """A file name of the service config ``cfg``: relative names are relative to the config's directory."""
    return name if os.path.isabs(name) else os.path.join(cfg.base_dir, name)


# -- DAS3 -------------------------------------------------------------------------------------------------
@kernel
def das3_tick(arrays, stale, tick, time_s, overrun, warm):
    """One tick with the DAS3 plant (:data:`sim.das3.plant.STEP_KERNEL`)."""
    plant, n_steps, u, bits = tick_inputs(arrays, tick, warm)
    bundle, x, xd, u0, loads, h, residual_limit, scheme = plant
    A, W = borrowed_items(bundle)
    status, n_clipped, n_done = DAS3_STEPS(A, W, x, xd, u0, u, loads, h, residual_limit, scheme, stale, n_steps)
    return status, n_clipped, n_done, tick_outputs(arrays, tick, time_s, n_done == n_steps, bits, overrun, warm)


@entry
def compute_tick(arrays, stale, tick, time_s, overrun, warm):
    """:func:`das3_tick` from Python (the entry only passes the StructRef on, ``sim.jit.bundle``)."""
    return das3_tick(arrays, stale, tick, time_s, overrun, warm)


threaded = njit(cache=True, nogil=True, parallel=True, error_model="numpy")
"""The batched ticks on numba's threads (``numba.set_num_threads`` sets how many)."""


@entry
def das3_engine_ticks(arrays, stale, ticks, n_ticks, period_s, results, i):
    """Up to ``n_ticks`` ticks of engine ``i`` of a batch (``arrays``: a typed list of the engines' tick arguments;
    ``stale[i]``: whether its first step re-evaluates; ``ticks[i]``: its first tick's index), each tick
    :func:`das3_tick` at time (tick + 1) ``period_s``, stopping at a failed step or a safety stop. ``results[i]`` =
    (the last plant status, excitations clipped, steps done, the STOP_* code, ticks run)."""
    first, clipped, done, status, stop, k = stale[i], 0, 0, 0, 0, 0
    while k < n_ticks and status == 0 and stop == 0:
        tick = ticks[i] + k
        status, n_clipped, n_done, stop = das3_tick(arrays[i], first, tick, (tick + 1) * period_s, False, False)
        first, clipped, done, k = False, clipped + n_clipped, done + n_done, k + 1
    results[i, 0], results[i, 1], results[i, 2], results[i, 3], results[i, 4] = status, clipped, done, stop, k


@entry
def das3_ticks(arrays, stale, ticks, n_ticks, period_s, results):
    """:func:`das3_engine_ticks` of engine i = 0..N-1, one after the other in the calling thread."""
    for i in range(ticks.shape[0]):
        das3_engine_ticks(arrays, stale, ticks, n_ticks, period_s, results, i)


@threaded
def das3_ticks_threaded(arrays, stale, ticks, n_ticks, period_s, results):
    """:func:`das3_ticks` with the engines shared among numba's threads."""
    for i in prange(ticks.shape[0]):     # i is unsigned in a prange: the typed list takes it as int64
        das3_engine_ticks(arrays, stale, ticks, n_ticks, period_s, results, np.int64(i))


def _das3_plant(model, cfg, step_s: float, initial_state):
    return Plant(model, step_s=step_s, initial_state=initial_state, scheme=cfg.plant.scheme)


DAS3 = register_plant(PlantType(
    name="das3", doc="the full DAS3 arm (sim.das3.plant)", model_class=Das3Model,
    load_model=lambda cfg: load_model(cfg.model), make_plant=_das3_plant, tick=compute_tick,
    batch_tick=das3_ticks, batch_tick_threaded=das3_ticks_threaded))


# -- the reduced MTG arm ---------------------------------------------------------------------------------
@kernel
def mtg_tick(arrays, stale, tick, time_s, overrun, warm):
    """One tick with the reduced MTG arm (:data:`sim.mtg.plant.STEP_KERNEL`)."""
    plant, n_steps, u, bits = tick_inputs(arrays, tick, warm)
    bundle, x, u0, loads, h = plant
    A, W = borrowed_items(bundle)
    status, n_clipped, n_done = MTG_STEPS(A, W, x, u0, u, loads, h, n_steps)
    return status, n_clipped, n_done, tick_outputs(arrays, tick, time_s, n_done == n_steps, bits, overrun, warm)


@entry
def compute_tick_mtg(arrays, stale, tick, time_s, overrun, warm):
    """:func:`mtg_tick` from Python."""
    return mtg_tick(arrays, stale, tick, time_s, overrun, warm)


@entry
def mtg_engine_ticks(arrays, stale, ticks, n_ticks, period_s, results, i):
    """:func:`das3_engine_ticks` with the MTG arm's tick (written out again: numba caches no compiled function that
    takes the tick as an argument, its type names the dispatcher object of one process)."""
    first, clipped, done, status, stop, k = stale[i], 0, 0, 0, 0, 0
    while k < n_ticks and status == 0 and stop == 0:
        tick = ticks[i] + k
        status, n_clipped, n_done, stop = mtg_tick(arrays[i], first, tick, (tick + 1) * period_s, False, False)
        first, clipped, done, k = False, clipped + n_clipped, done + n_done, k + 1
    results[i, 0], results[i, 1], results[i, 2], results[i, 3], results[i, 4] = status, clipped, done, stop, k


@entry
def mtg_ticks(arrays, stale, ticks, n_ticks, period_s, results):
    """:func:`mtg_engine_ticks` of engine i = 0..N-1, one after the other in the calling thread."""
    for i in range(ticks.shape[0]):
        mtg_engine_ticks(arrays, stale, ticks, n_ticks, period_s, results, i)


@threaded
def mtg_ticks_threaded(arrays, stale, ticks, n_ticks, period_s, results):
    """:func:`mtg_ticks` with the engines shared among numba's threads."""
    for i in prange(ticks.shape[0]):
        mtg_engine_ticks(arrays, stale, ticks, n_ticks, period_s, results, np.int64(i))


MTG_OPTIONS = Section("plant (mtg)", "Keys only the reduced MTG arm (`type = \"mtg\"`) reads.", (
    Key("mtg_parameters", "string", "default",
        "MTG parameter file, relative to the config (`default`: the shipped sim/data/mtg_default.json)"),))


def _mtg_model(cfg):
    """The MTG arm on the DAS3 segments of the config's subject size, each MTG scaled for the config's strength,
    patient and size (:mod:`sim.mtg.patient`, :mod:`sim.mtg.contracture`, :func:`sim.mtg.model.moment_scale`)."""
    params = cfg.plant.options["mtg_parameters"]
    return mtg_model_for(cfg.model, cfg.patient, None if params == "default" else config_file(cfg, params))


def _mtg_plant(model, cfg, step_s: float, initial_state):
    return MtgPlant(model, step_s=step_s, initial_state=initial_state)


MTG = register_plant(PlantType(
    name="mtg", doc="the reduced muscle-torque-generator arm (sim.mtg.plant)", model_class=MtgModel,
    load_model=_mtg_model, make_plant=_mtg_plant, tick=compute_tick_mtg, batch_tick=mtg_ticks,
    batch_tick_threaded=mtg_ticks_threaded,
    options=MTG_OPTIONS,
    file_options=("mtg_parameters",)))
