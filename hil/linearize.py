"""``hil model linearize``: a plant's linear model (:mod:`sim.linear.operating`: the DAS3 arm from its exact
Jacobians, the reduced MTG arm from central differences of its compiled forces) with a service config's stimulation
channels as inputs, its reduced and discrete forms, written as .npz or .mat.

Channel inputs. The map is u_k = clip(max_c G_ck l_c, 0, 1), l_c = r(x_c) phi_c (:mod:`hil.rt.stimulation`). The input
is either the channel *level* l_c (dimensionless, 0..phi_c: a controller inverts the recruitment curve, e.g. with
``hil.rt.stimulation.amplitude_for_level``, which removes the threshold dead zone) or the *amplitude* I_c (mA) at a
fixed pulse width and frequency, with dl/dI = phi_c 6 x (1 - x) PW / (Q_sat - Q_th) (zero below the threshold: a
channel at rest has no linear effect). du_k/dl_c = G_ck where channel c sets muscle k's max and u_k < 1 (the
one-sided derivative for a rising level). Left out of the linear model: the electromechanical delay (``--pade``
appends a first-order Pade section per delayed channel), fatigue (a fresh muscle, fitness 1), the spill-over
(exact below its onset, the saturation charge by default) and the session's threshold draw beyond its charges.
"""
from __future__ import annotations

import datetime
import json
from pathlib import Path

import numpy as np
from scipy.io import savemat

from hil import __version__
from hil.config import ServiceConfig
from hil.patients import load_patient, patient_arm
from hil.rt.stimulation import (
    StimulationModel,
    amplitude_for_level,
    channel_phi,
    common_pulse_limits,
    load_stimulation_config,
)
from sim.linear.operating import (
    Inputs,
    LinearizeError,
    LinearModel,
    excitation_inputs,
    hold_posture,
    linear_view,
    linearize,
    parse_posture,
    reduced_states,
)
from sim.linear.reduce import pade_delays, residualize, zoh
from sim.output_file import output_file
from sim.stimulation_map import excitations_of_levels, excitations_with_spill

INPUT_KINDS = ("excitations", "groups", "channels")
CHANNEL_VARIABLES = ("level", "amplitude")
LEVEL_ZERO = 1e-9
"""A state's activations below this give channel level 0 (the published equilibrium's are ~1e-17, numerical zeros)."""


def stimulation_model(cfg: ServiceConfig | None, model) -> StimulationModel:
    """The config's channel map; a config without channels: :class:`LinearizeError` naming the file."""
    table = {} if cfg is None else cfg.stimulation
    if cfg is None or table.get("mode", "direct") != "channels" or not table.get("channel"):
        where = "no --config" if cfg is None else f"{cfg.path}: [stimulation] mode is not \"channels\""
        raise LinearizeError(f"--inputs channels needs stimulation channels ({where}; e.g. configs/elbow-hold.toml)")
    return StimulationModel(load_stimulation_config(table, model.muscle_names, cfg.path), model.muscle_names, cfg.path)


def channel_inputs(stim: StimulationModel, select: list[str] | None, frequency_hz: float) -> Inputs:
    """Channel levels l_c as inputs (module docstring); ``select``: channel names (default: all); the other
    channels stay at level 0."""
    names = tuple(ch.name for ch in stim.channels)
    keys = list(names) if select is None else select
    for key in keys:
        if key not in names:
            raise LinearizeError(f"--inputs: unknown channel {key!r} (channels: {', '.join(names)})")
    cols = [names.index(k) for k in keys]
    upper = np.array([channel_phi(stim.channels[c], frequency_hz) for c in cols])
    spill = stim.spill_gains.shape[0] > 0

    def excitation(v):
        levels = np.zeros(len(names))
        levels[cols] = v
        u = np.zeros(stim.gains.shape[1])
        if spill:
            excitations_with_spill(stim.gains, levels, stim.spill_gains, stim.spill_onset, u)
        else:
            excitations_of_levels(stim.gains, levels, u)
        drive = stim.gains * levels[:, None]
        top = drive.max(axis=0)
        J = np.zeros((u.size, len(cols)))
        for j, c in enumerate(cols):
            sets = (drive[c] >= top) & (u < 1.0)
            J[sets, j] = stim.gains[c, sets]
        return u, J

    def of_excitation(a):
        levels = np.array([float(np.max(np.where(stim.gains[c] > 0, a / np.where(stim.gains[c] > 0, stim.gains[c], 1),
                                                 0.0))) for c in cols])
        return np.where(levels < LEVEL_ZERO, 0.0, levels)

    return Inputs(tuple(keys), "channel level r*phi (0..phi)", np.zeros(len(cols)), upper, excitation, of_excitation)


def check_pulse(stim: StimulationModel, names, pulse_width_us: float | None, frequency_hz: float) -> None:
    """The pulse frequency (and, for amplitude inputs, the pulse width) within every input channel's limits: a
    pulse the channel would reject has no linear effect, and its B columns would be silently zero."""
    top, lowest, highest = common_pulse_limits([ch for ch in stim.channels if ch.name in names])
    if not lowest <= frequency_hz <= highest:
        raise LinearizeError(f"--frequency-hz must be within the input channels' limits, {lowest:g} to {highest:g} Hz, "
                             f"not {frequency_hz!r}")
    if pulse_width_us is not None and not 0.0 < pulse_width_us <= top:
        raise LinearizeError(f"--pulse-width-us must be more than 0 and at most {top:g} us (the input channels' "
                             f"limit), not {pulse_width_us!r}")


def level_per_ma(ch, amplitude_ma: float, pulse_width_s: float, frequency_hz: float) -> float:
    """dl/dI (per mA) at ``amplitude_ma``: phi 6 x (1 - x) PW / (Q_sat - Q_th), 0 outside 0 < x < 1."""
    x = (pulse_width_s * amplitude_ma * 1e-3 - ch.threshold_charge_c) / (ch.saturation_charge_c - ch.threshold_charge_c)
    if not 0.0 < x < 1.0:
        return 0.0
    return channel_phi(ch, frequency_hz) * 6.0 * x * (1.0 - x) * pulse_width_s * 1e-3 / (
        ch.saturation_charge_c - ch.threshold_charge_c)


def to_amplitude(lm: LinearModel, stim: StimulationModel, pulse_width_s: float, frequency_hz: float) -> None:
    """Turn the level inputs of ``lm`` into amplitudes (mA) at the operating point, in place."""
    chans = {ch.name: ch for ch in stim.channels}
    amps, slopes = [], []
    for name, level in zip(lm.input_names, lm.u0):
        ch = chans[name]
        amp = amplitude_for_level(ch, float(level), pulse_width_s, frequency_hz)
        amp_ma = 0.0 if level <= 0.0 else amp * 1e3
        amps.append(amp_ma)
        slopes.append(level_per_ma(ch, amp_ma, pulse_width_s, frequency_hz))
        if slopes[-1] == 0.0:
            lm.notes.append(f"channel {name}: at {amp_ma:.2f} mA its recruitment is flat (below threshold or "
                            "saturated): its B column is zero; use --channel-input level")
    lm.B = lm.B * np.array(slopes)[None, :]
    lm.u0 = np.array(amps)
    lm.input_unit = f"amplitude mA at {pulse_width_s * 1e6:g} us, {frequency_hz:g} Hz, single pulses"


def parse_inputs(spec: str) -> tuple[str, list[str] | None]:
    """'channels' | 'channels=biceps,triceps' | 'excitations=bicl' | 'groups=bic,tric' -> (kind, names)."""
    kind, eq, rest = spec.partition("=")
    kind = kind.strip()
    if kind not in INPUT_KINDS:
        raise LinearizeError(f"--inputs: {spec!r}: one of {', '.join(INPUT_KINDS)}, optionally =name,name")
    names = [n.strip() for n in rest.split(",") if n.strip()] if eq else None
    if eq and not names:
        raise LinearizeError(f"--inputs: {spec!r}: name at least one input after '='")
    return kind, names


def reduce_keep(model, spec: str, lm: LinearModel) -> tuple[list[int], list[str]]:
    """The states a '--reduce ELx[,GHz]' keeps (:func:`sim.linear.operating.reduced_states`) and their names."""
    keep = reduced_states(model, [n.strip() for n in spec.split(",") if n.strip()], lm.B[:lm.x0.size])
    return keep, [lm.state_names[i] for i in keep]


def build(model, cfg: ServiceConfig | None, *, x_state=None, posture: str | None = None,
          inputs: str = "excitations", channel_input: str = "level", pulse_width_us: float = 300.0,
          frequency_hz: float = 40.0, outputs: str = "q,qdot", reduce: str | None = None, pade: bool = False,
          period_s: float | None = None) -> tuple[LinearModel, dict]:
    """The linear model and the arrays to write (module docstring; ``hil model linearize --help``)."""
    kind, select = parse_inputs(inputs)
    if channel_input not in CHANNEL_VARIABLES:
        raise LinearizeError(f"--channel-input must be one of {', '.join(CHANNEL_VARIABLES)}, not {channel_input!r}")
    stim = None
    if kind == "channels":
        stim = stimulation_model(cfg, model)
        inp = channel_inputs(stim, select, frequency_hz)
        check_pulse(stim, inp.names, pulse_width_us if channel_input == "amplitude" else None, frequency_hz)
    elif kind == "groups":
        inp = excitation_inputs(model, select, grouped=True)
    else:
        inp = excitation_inputs(model, select)
    if posture is not None:
        x0, v0 = hold_posture(model, inp, parse_posture(model, posture))
    else:
        x0 = np.array(model.equilibrium_state if x_state is None else x_state)
        v0 = inp.of_excitation(x0[linear_view(model).ia:])
    lm = linearize(model, x0, inp, v0, outputs)
    if stim is not None and channel_input == "amplitude":
        to_amplitude(lm, stim, pulse_width_us * 1e-6, frequency_hz)
    arrays = {"A": lm.A, "B": lm.B, "C": lm.C, "D": lm.D, "x0": lm.x0, "u0": lm.u0, "y0": lm.y0,
              "excitation0": lm.excitation0, "state_names": np.array(lm.state_names),
              "input_names": np.array(lm.input_names), "output_names": np.array(lm.output_names)}
    if pade and stim is not None:
        delays = [next(ch.emd_s for ch in stim.channels if ch.name == n) for n in lm.input_names]
        if any(d > 0 for d in delays):
            arrays["A_pade"], arrays["B_pade"], arrays["C_pade"], arrays["D_pade"] = pade_delays(
                lm.A, lm.B, lm.C, lm.D, delays)
        lm.notes.append("first-order Pade sections for the channels' electromechanical delays: *_pade, their states "
                        "after x" if any(d > 0 for d in delays) else "--pade: no channel has an electromechanical delay")
    if reduce is not None:
        keep, names = reduce_keep(model, reduce, lm)
        Ar, Br, Cr, Dr = residualize(lm.A, lm.B, lm.C, lm.D, keep)
        arrays.update(A_reduced=Ar, B_reduced=Br, C_reduced=Cr, D_reduced=Dr,
                      reduced_state_names=np.array(names), reduced_keep=np.array(keep))
    if period_s is not None:
        arrays["dt"] = np.array(period_s)
        arrays["A_discrete"], arrays["B_discrete"] = zoh(lm.A, lm.B, period_s)
        if reduce is not None:
            arrays["A_reduced_discrete"], arrays["B_reduced_discrete"] = zoh(arrays["A_reduced"],
                                                                             arrays["B_reduced"], period_s)
    return lm, arrays


def linearized_model(plant: str | None, patient: str | None):
    """The model ``hil model linearize`` takes without ``--config``: the published DAS3 arm, or the MTG arm
    (``--plant mtg``), built for ``--patient`` when one is given."""
    if plant not in (None, "das3", "mtg"):
        raise LinearizeError(f"--plant: {plant!r} is not a plant type (das3 or mtg)")
    return patient_arm(plant or "das3", None if patient is None else load_patient(patient))


def angles_deg(model, x: np.ndarray) -> dict[str, float]:
    """The state's coordinate angles by name, degrees (the DAS3 DOFs; the MTG arm's five coordinates)."""
    view = linear_view(model)
    n = len(view.coordinate_names)
    return dict(zip(view.coordinate_names, np.degrees(x[view.iq:view.iq + n]).round(6).tolist()))


def provenance(model, cfg_path, options: dict, lm: LinearModel) -> dict:
    return {"plant": model.kind, "model_data_sha256": model.data_sha256, "config": None if cfg_path is None else str(cfg_path),
            "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "fes_hil_version": __version__, "options": options, "input_unit": lm.input_unit,
            "residual_max": lm.residual_max, "residual_rms": lm.residual_rms, "notes": lm.notes,
            "method": linear_view(model).method}


def check_out(path: Path) -> None:
    """``--out`` names a .npz or .mat file."""
    if path.suffix.lower() not in (".npz", ".mat"):
        raise LinearizeError(f"--out {path}: unknown extension {path.suffix!r} (use .npz or .mat)")


def write(path: Path, arrays: dict, prov: dict) -> None:
    """.npz (names as string arrays, ``provenance`` a JSON string) or .mat (scipy.io.savemat: names as cell arrays,
    ``provenance`` a struct)."""
    check_out(path)
    if path.suffix.lower() == ".npz":
        with output_file(path, "wb") as fh:
            np.savez(fh, provenance=np.array(json.dumps(prov)), **arrays)
    else:
        mat = {k: (np.array(v, dtype=object) if v.dtype.kind == "U" else v) for k, v in arrays.items()}
        with output_file(path, "wb") as fh:
            savemat(fh, {**mat, "provenance": {k: ("" if v is None else json.dumps(v) if isinstance(v, (dict, list))
                                                else v) for k, v in prov.items()}})
