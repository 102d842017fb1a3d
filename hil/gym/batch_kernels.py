"""The compiled bookkeeping of a batch's action step (:mod:`hil.gym.arm_batch`), one call for all arms instead of
Python per arm: latching the policy's checked commands, and gathering the arms' tick records; and the byte copy
that restores an engine's snapshot (:mod:`hil.gym.snapshot`).

Both take numba typed lists of the arms' own arrays (built once per batch layout), so each arm's engine keeps
its arrays and its compiled tick's arguments unchanged. ``entry``: a typed list is a reference-counted object.
"""
from __future__ import annotations

from hil.safety.rules import WD_LAST_VALID
from sim.jit.kernel import entry


@entry
def latch_checked_actions(latched, latched_by, counters, watchdogs, received_at, arms, rows, channels, limits,
                          ticks, driver, latched_out):
    """Latch the commands of each arm ``arms[k]`` whose every row ``rows[k, j]`` (pulse width us, amplitude mA,
    frequency Hz, mode) is what :meth:`hil.rt.engine.TickEngine.channel` accepts unchanged
    (:meth:`hil.rt.stimulation.StimulationModel.check_command` with no reason): pulse width in [0, limits[j, 0]],
    amplitude in [0, limits[j, 1]], frequency 0 or in [limits[j, 2], limits[j, 3]] (each comparison is false for
    NaN, so a non-finite value fails it; the mode is 0, as :meth:`ActionLayout.rows` writes it). Then do
    what ``channel`` does with such a command, less the command-log entry (the batch records no log):
    ``latched[a][channels[j]] = rows[k, j]``, ``latched_by[a][channels[j]] = driver``, the driver's received
    counter ``counters[a][received_at[a]]`` up by the number of channels, the watchdog fed at the arm's tick
    (``watchdogs[a][WD_LAST_VALID] = ticks[a]``). ``latched_out[k]``: whether arm ``arms[k]``'s commands were
    latched (the others go command by command through the engine, which clamps or rejects and counts)."""
    n_channels = channels.shape[0]
    for k in range(arms.shape[0]):
        a = arms[k]
        ok = True
        for j in range(n_channels):
            pw, amp, freq = rows[k, j, 0], rows[k, j, 1], rows[k, j, 2]
            if not (0.0 <= pw <= limits[j, 0] and 0.0 <= amp <= limits[j, 1]):
                ok = False
            elif not (limits[j, 2] <= freq <= limits[j, 3] or freq == 0.0):
                ok = False
        latched_out[k] = ok
        if not ok:
            continue
        target, by = latched[a], latched_by[a]
        for j in range(n_channels):
            c = channels[j]
            for v in range(4):
                target[c, v] = rows[k, j, v]
            by[c] = driver
        counters[a][received_at[a]] += n_channels
        watchdogs[a][WD_LAST_VALID] = ticks[a]


@entry
def gather_records(records, sources, arms, frames, frame_offset):
    """``records[a] = sources[a]`` (the bytes of arm ``a``'s tick record) for each arm in ``arms``, and where
    ``frame_offset`` >= 0 also ``frames[a]`` = the record's frame (its bytes from ``frame_offset``)."""
    for k in range(arms.shape[0]):
        a = arms[k]
        row, source = records[a], sources[a]
        for b in range(source.shape[0]):
            row[b] = source[b]
        if frame_offset >= 0:
            frame = frames[a]
            for b in range(frame.shape[0]):
                frame[b] = source[frame_offset + b]


@entry
def copy_bytes(targets, sources):
    """``targets[k][:] = sources[k]`` for every k (byte arrays of equal sizes)."""
    for k in range(len(targets)):
        target, source = targets[k], sources[k]
        for b in range(source.shape[0]):
            target[b] = source[b]
