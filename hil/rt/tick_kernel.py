"""The compiled part of a tick: one call from Python per tick (:meth:`hil.rt.engine.TickEngine.step`).

In one numba call: the safety rules that decide before the step (the watchdog, the GH and ROM actions from
the last frame), the applied stimulation (the latched commands, or zero when safety says so) and its
excitation (the stimulation map, or the latched direct excitations), the plant's sub-steps under that
zero-order hold, the noise-free sensor frame with the lab sensors' fields, and the rules that classify it (GH
monitor, range of motion) with its status bits. The rules are those of :mod:`hil.safety.rules`, whose objects hold the state the kernel
updates in place. Python keeps what raises or has no fixed size: a failed plant step, the optional
measurement model, the operator's message after a stop.

A plant type's compiled tick (:mod:`hil.rt.plants`) is :func:`tick_inputs`, its plant's step kernel over the
sub-steps, then :func:`tick_outputs`, inside one numba entry.

The patient's own drive (a driver with role ``voluntary``, :mod:`hil.rt.voluntary`) is latched apart from
the stimulation: the plant gets u_plant = max(u, reach u_voluntary) per element (reach: the share of the element
the patient's drive reaches, :mod:`hil.rt.voluntary`), while the record's ``u`` stays the stimulation's. Safety
zeroes the stimulation only, never the patient's own drive.

Everything the call touches is preallocated and fixed for the run, and held in one StructRef
(:func:`tick_arrays`), so a call unboxes one object and five scalars. After the first call the engine calls
the compiled overload directly (:func:`direct_call`): numba types a StructRef argument in the interpreter on
every call through its dispatcher.
"""
from __future__ import annotations

from numba import typeof

from hil.rt.lab_sensors import lab_tick
from hil.rt.sensor import fill_true_frame
from hil.rt.stimulation import AMP_SCALE, PW_SCALE, delayed_excitation
from hil.safety.rules import STOP_NONE, rules_after_step, rules_before_step
from sim.jit.bundle import Bundle, borrowed_items, new_bundle
from sim.jit.kernel import kernel


def tick_arrays(plant, latched, direct, applied, u, stim_params, emd, fatigue, use_stim: bool, rules: tuple,
                frame_views, frame_status, n_steps: int, voluntary: tuple, lab: tuple) -> Bundle:
    """Bundle an engine's tick: the plant's kernel arguments (its ``kernel_args``, :mod:`sim.plants`), the
    latched and applied channel rows and direct excitations, the excitation ``u``, the stimulation map's
    parameters, its electromechanical delay line and fatigue state, the safety rules' state and parameters
    (:func:`hil.safety.rules.tick_rules`), the views of plant outputs and of the sensor's frame and its status,
    the patient's own drive (latched, recorded, the plant's excitation; :func:`hil.rt.voluntary.voluntary_arrays`)
    and the lab sensors' arrays (:attr:`hil.rt.sensor.SensorModel.lab_arrays`)."""
    out = plant.outputs
    outputs = (out.q, out.qdot, out.th_angles, out.hand_position, out.gh_force, out.st_contact_force,
               out.gh_stability_cell)
    return new_bundle((plant.kernel_args, n_steps, latched, direct, applied, u, stim_params, emd, fatigue, use_stim,
                       rules, outputs, frame_views, frame_status, voluntary, lab))


@kernel
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


@kernel
def _voluntary_drive(u, latch, reach, u_voluntary, u_plant):
    """With a voluntary source (a non-empty latch): u_voluntary <- the latched drive (recorded) and u_plant =
    max(u, reach * latch) per element, u left as the stimulation's; returns whether there is a source."""
    if latch.shape[0] == 0:
        return False
    for k in range(u.shape[0]):
        u_voluntary[k] = latch[k]
        u_plant[k] = max(u[k], reach[k] * latch[k])
    return True


@kernel
def tick_inputs(arrays, tick, warm):
    """The tick up to the plant: the rules before the step, the applied stimulation and the excitation ``u``;
    returns (the plant's kernel arguments, sub-steps, the plant's excitation, status bits so far): ``u``, or
    max(u, the patient's own drive) with a voluntary source. ``warm``: a warm-up call, with zero stimulation and
    the safety state left alone."""
    (plant, n_steps, latched, direct, applied, u, stim, emd, fatigue, use_stim, rules, outputs, frame,
     frame_status, voluntary, lab) = borrowed_items(arrays)
    zero, bits = _before_step(rules, tick, latched, direct, warm)
    _excitation(zero, use_stim, latched, direct, applied, u, stim, emd, fatigue)
    latch, reach, u_voluntary, u_plant = voluntary
    if _voluntary_drive(u, latch, reach, u_voluntary, u_plant):
        return plant, n_steps, u_plant, bits
    return plant, n_steps, u, bits


@kernel
def tick_outputs(arrays, tick, time_s, all_done, bits, overrun, warm):
    """The tick after the plant: when every sub-step succeeded (``all_done``), the true frame with the lab sensors'
    fields (from the true joint state; not in a warm-up) and its status, classified by the rules after the step;
    returns the STOP_* code."""
    (plant, n_steps, latched, direct, applied, u, stim, emd, fatigue, use_stim, rules, outputs, frame,
     frame_status, voluntary, lab) = borrowed_items(arrays)
    stop = _after_step(rules, outputs, frame, frame_status, tick, time_s, all_done, bits, overrun, warm)
    if all_done and not warm:
        imu, encoder, emg, rng = lab
        lab_tick(tick, outputs[0], outputs[1], imu, encoder, emg, rng)
    return stop


@kernel
def _before_step(rules, tick, latched, direct, warm):
    """(stimulation must be zero, status bits so far): the rules before the step; zero for a warm-up."""
    if warm:
        return True, 0
    return rules_before_step(rules, tick, latched, direct)


@kernel
def _after_step(rules, outputs, frame, frame_status, tick, time_s, all_done, bits, overrun, warm):
    """The true frame and its status when every step succeeded, classified by the rules; the STOP_* code."""
    if not all_done:
        return STOP_NONE
    q, qdot, th, hand, gh_force, st_force, stability = outputs
    fill_true_frame(frame, tick, time_s, q, qdot, th, hand, gh_force, st_force, stability[0])
    if warm:
        return STOP_NONE
    stop, bits = rules_after_step(rules, q, stability[0], bits, overrun)
    frame_status[0] = bits
    return stop


def direct_call(dispatcher, *args):
    """The compiled overload of ``dispatcher`` that ``args`` select, called without numba's dispatch: the
    dispatcher types a StructRef argument in the interpreter on every call, which costs a large part of the
    tick's Python. The overload must exist (called once before); the arguments of later calls must have the
    types of ``args``. Falls back to the dispatcher where numba keeps its overloads otherwise."""
    try:
        return dispatcher.overloads[tuple(typeof(a) for a in args)].entry_point
    except (AttributeError, KeyError):
        return dispatcher
