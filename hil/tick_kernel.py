"""The compiled part of a tick: one call from Python per tick (:meth:`hil.engine.TickEngine.step`).

In one numba call: the applied stimulation (the latched commands, or zero when safety says so) and its
excitation (the stimulation map, or the latched direct excitations), the plant's sub-steps under that
zero-order hold, the range-of-motion check and the noise-free sensor frame. Python keeps what has state
and rules (watchdog, the alarm actions, status bits, the optional measurement model), so the decisions
read as before and the call crosses the Python/numba boundary once instead of once per piece.

Everything the call touches is preallocated and fixed for the run, and held in one StructRef
(:func:`tick_arrays`), so a call unboxes one object and four scalars. After the first call the engine calls
the compiled overload directly (:func:`direct_call`): numba types a StructRef argument in the interpreter on
every call through its dispatcher.
"""
from __future__ import annotations

from numba import njit, typeof

from hil.safety import outside_range
from hil.sensor import fill_true_frame
from hil.stimulation import AMP_SCALE, PW_SCALE, delayed_excitation
from sim._bundle import Bundle, new_bundle
from sim._mtg_step import mtg_steps
from sim._step import plant_steps


def tick_arrays(plant, latched, direct, applied, u, stim_params, emd, fatigue, use_stim: bool, rom_lo, rom_hi,
                frame_views, n_steps: int) -> Bundle:
    """Bundle an engine's tick: the plant's kernel arguments (:attr:`sim.plant.Plant.kernel_args`), the
    latched and applied channel rows and direct excitations, the excitation ``u``, the stimulation map's
    parameters, its electromechanical delay line and fatigue state, the range limits (rad), the views of
    plant outputs and of the sensor's frame."""
    out = plant.outputs
    outputs = (out.q, out.qdot, out.th_angles, out.hand_position, out.gh_force, out.st_contact_force,
               out.gh_stability_cell)
    return new_bundle((plant.kernel_args, n_steps, latched, direct, applied, u, stim_params, emd, fatigue, use_stim,
                   rom_lo, rom_hi, outputs, frame_views))


@njit(cache=True, nogil=True)
def _excitation(zero, use_stim, latched, direct, applied, u, stim, emd, fatigue):
    """applied <- latched (or 0 when safety zeroes it); u <- the stimulation map of the applied levels
    each channel's electromechanical delay ago times its fitness, or the direct excitations (or 0)."""
    for c in range(latched.shape[0]):
        for j in range(4):
            applied[c, j] = 0.0 if zero else latched[c, j]
    if use_stim:
        delayed_excitation(applied, PW_SCALE, AMP_SCALE, stim, emd, fatigue, u)
    else:
        for k in range(u.shape[0]):
            u[k] = 0.0 if zero else direct[k]


@njit(cache=True, nogil=True)
def compute_tick(arrays, stale, zero, tick, time_s):
    """One tick's compiled work with the DAS3 plant; returns (plant status, excitations clipped, plant steps
    done, posture outside the range of motion, GH stability value). The frame is filled only when every step
    succeeded."""
    (plant, n_steps, latched, direct, applied, u, stim, emd, fatigue, use_stim, rom_lo, rom_hi, outputs,
     frame) = arrays.items
    _excitation(zero, use_stim, latched, direct, applied, u, stim, emd, fatigue)
    bundle, x, xd, u0, loads, h, residual_limit, scheme = plant
    A, W = bundle.items
    status, n_clipped, n_done = plant_steps(A, W, x, xd, u0, u, loads, h, residual_limit, scheme, stale, n_steps)
    outside, gh_stability = _finish(outputs, rom_lo, rom_hi, frame, tick, time_s, n_done == n_steps)
    return status, n_clipped, n_done, outside, gh_stability


@njit(cache=True, nogil=True)
def compute_tick_mtg(arrays, stale, zero, tick, time_s):
    """:func:`compute_tick` with the reduced MTG arm (:mod:`sim.mtg_plant`) as the plant."""
    (plant, n_steps, latched, direct, applied, u, stim, emd, fatigue, use_stim, rom_lo, rom_hi, outputs,
     frame) = arrays.items
    _excitation(zero, use_stim, latched, direct, applied, u, stim, emd, fatigue)
    bundle, x, u0, loads, h = plant
    A, W = bundle.items
    status, n_clipped, n_done = mtg_steps(A, W, x, u0, u, loads, h, n_steps)
    outside, gh_stability = _finish(outputs, rom_lo, rom_hi, frame, tick, time_s, n_done == n_steps)
    return status, n_clipped, n_done, outside, gh_stability


@njit(cache=True, nogil=True)
def _finish(outputs, rom_lo, rom_hi, frame, tick, time_s, all_done):
    """(posture outside the range of motion, GH stability value); the true frame when every step succeeded.
    The value is returned so that the GH monitor needs no numpy read of the plant's output."""
    q, qdot, th, hand, gh_force, st_force, stability = outputs
    if all_done:
        fill_true_frame(frame, tick, time_s, q, qdot, th, hand, gh_force, st_force, stability[0])
    return outside_range(q, rom_lo, rom_hi), stability[0]


def tick_function(plant):
    """The compiled tick for this plant: :func:`compute_tick_mtg` for the MTG arm, else :func:`compute_tick`."""
    return compute_tick_mtg if plant.model.kind == "mtg" else compute_tick


def direct_call(dispatcher, *args):
    """The compiled overload of ``dispatcher`` that ``args`` select, called without numba's dispatch: the
    dispatcher types a StructRef argument in the interpreter on every call, which costs a large part of the
    tick's Python. The overload must exist (called once before); the arguments of later calls must have the
    types of ``args``. Falls back to the dispatcher where numba keeps its overloads otherwise."""
    try:
        return dispatcher.overloads[tuple(typeof(a) for a in args)].entry_point
    except (AttributeError, KeyError):
        return dispatcher
