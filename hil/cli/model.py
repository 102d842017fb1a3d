"""``hil model``: inspect the DAS3 model (DOFs, muscle elements) and solve its passive equilibrium."""
from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path
from typing import Annotated, Optional

import numpy as np
import typer
from rich.table import Table

from hil import __version__
from hil.cli.common import (
    BadInputError,
    check_output_path,
    key_value_table,
    load_model_options,
    out_console,
    print_json,
    user_errors,
)
from hil.recording.files import write_state_json
from sim.das3.config import ModelConfig
from sim.output_file import write_output_text

app = typer.Typer(no_args_is_help=True, help="Inspect the DAS3 model.")


def model_options(config: ModelConfig) -> dict:
    """The options as the model TOML spells them (angles in degrees)."""
    return {"muscle_model": config.muscle_model, "shoulder_passive": config.shoulder_passive,
            "hand_weight": config.hand_weight,
            "gh_rim_theta_deg": round(math.degrees(config.gh_rim_theta), 6),
            "gh_rim_phi_deg": round(math.degrees(config.gh_rim_phi), 6),
            "joint_k1": config.joint_k1, "joint_k2": config.joint_k2, "joint_damping": config.joint_damping}


@app.command("info")
def model_info(
    json_out: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
    model_config: Annotated[Optional[Path], typer.Option(
        help="Model options TOML (default: the published model).")] = None,
    patient: Annotated[Optional[str], typer.Option(
        help="A virtual patient (preset name or patient file): list each muscle group's state and strength.")] = None,
) -> None:
    """The model options in effect (muscle model, passive shoulder moments, hand weight, glenoid rim, joint
    stiffness), the DOFs with their ranges and the muscle elements with the DOFs they cross; with --patient,
    each muscle group's state, strength and Fmax factor, and the reduced MTG arm's actuator factors for the
    patient."""
    with user_errors():
        from hil.patients import load_patient, patient_groups, patient_size
        from sim.das3.model import load_model
        from sim.patient import apply_patient

        who = None if patient is None else load_patient(patient)
        config = load_model_options(model_config)
        if who is not None:
            config = apply_patient(config, who)
        model = load_model(config)
        groups = None if who is None else {"name": who.name, "sources": list(who.sources),
                                           "groups": patient_groups(who, model), "size": patient_size(who, model),
                                           "mtg": mtg_actuators(config, who)}
    options = model_options(model.config)
    dof_names = model.dof_names
    ranges_deg = np.degrees(model.dof_ranges)
    muscles = [
        {"index": i, "name": name, "dofs": [dof_names[j] for j in dofs], "dof_indices": list(dofs),
         "crosses_gh": bool(model.crosses_gh[i])}
        for i, (name, dofs) in enumerate(zip(model.muscle_names, model.muscle_dof_indices))
    ]
    gh_names = [m["name"] for m in muscles if m["crosses_gh"]]
    if json_out:
        print_json({
            "model_options": options,
            "n_states": int(model.n_states),
            "dofs": [{"index": i, "name": name, "range_deg": ranges_deg[i].tolist(),
                      "range_rad": model.dof_ranges[i].tolist()} for i, name in enumerate(dof_names)],
            "muscles": muscles,
            "muscles_crossing_gh": gh_names,
            **({} if groups is None else {"patient": groups}),
        })
        return

    console = out_console()
    opts = Table(title="Model options")
    opts.add_column("option")
    opts.add_column("value")
    for key, value in options.items():
        opts.add_row(key, str(value))
    console.print(opts)
    dofs = Table(title=f"DAS3 DOFs ({model.n_states} states)")
    dofs.add_column("#", justify="right")
    dofs.add_column("DOF")
    dofs.add_column("min (deg)", justify="right")
    dofs.add_column("max (deg)", justify="right")
    for i, name in enumerate(dof_names):
        dofs.add_row(str(i), name, f"{ranges_deg[i, 0]:.1f}", f"{ranges_deg[i, 1]:.1f}")
    console.print(dofs)

    table = Table(title=f"Muscle elements ({len(muscles)}; {len(gh_names)} cross GH)")
    table.add_column("#", justify="right")
    table.add_column("muscle")
    table.add_column("DOFs crossed")
    table.add_column("crosses GH", justify="center")
    for m in muscles:
        table.add_row(str(m["index"]), m["name"], " ".join(m["dofs"]), "yes" if m["crosses_gh"] else "")
    console.print(table)
    if groups is not None:
        console.print(_patient_table(groups))
        console.print(_size_table(groups["size"]))
        console.print(_mtg_table(groups["mtg"]))


def mtg_actuators(patient_config: ModelConfig, who) -> dict:
    """The reduced MTG arm's factors for patient ``who`` (``patient_config``: the model options with the patient
    applied; :mod:`sim.mtg.patient`): each MTG's strength, gate and reach, and with a contracture each coordinate it
    acts on with its rest angle and the able-bodied one (:mod:`sim.mtg.contracture`)."""
    from sim.mtg.model import mtg_model_for

    mtg = mtg_model_for(patient_config, who)
    doc = {"actuators": [{"name": n, "strength": float(s), "gate": float(g), "reach": float(r)}
                         for n, s, g, r in zip(mtg.muscle_names, *mtg.actuators)]}
    if mtg.contracture.n_knots.any():
        able = mtg_model_for(dataclasses.replace(patient_config, contracture=()), who)
        doc["contracture"] = [{"coordinate": name, "rest_deg": math.degrees(mtg.equilibrium_state[c]),
                               "able_bodied_rest_deg": math.degrees(able.equilibrium_state[c])}
                              for c, name in enumerate(mtg.coordinate_names) if mtg.contracture.n_knots[c]]
    return doc


def _mtg_table(mtg: dict) -> Table:
    table = Table(title="MTG arm: each actuator's factors (strength on tau_max, excitation gate, own drive's reach)")
    for column in ("MTG", "strength", "gate", "reach"):
        table.add_column(column)
    for a in mtg["actuators"]:
        table.add_row(a["name"], f"{a['strength']:.3f}", f"{a['gate']:.3f}", f"{a['reach']:.3f}")
    if "contracture" in mtg:
        table.caption = "contracture, rest angle (able-bodied): " + ", ".join(
            f"{c['coordinate']} {c['rest_deg']:.1f} deg ({c['able_bodied_rest_deg']:.1f})" for c in mtg["contracture"])
    return table


def _patient_table(patient: dict) -> Table:
    table = Table(title=f"Patient {patient['name']}: muscle groups")
    for column in ("group", "state", "strength", "Fmax factor", "stimulable", "elements"):
        table.add_column(column)
    for g in patient["groups"]:
        table.add_row(g["group"], g["state"], f"{g['strength']:g}", ", ".join(f"{f:g}" for f in g["fmax_factor"]),
                      "yes" if g["stimulable"] else "no", str(len(g["elements"])))
    return table


def _size_table(size: dict) -> Table:
    table = Table(title=f"Size: length x{size['length_scale']:.4g}, mass x{size['mass_scale']:.4g}, Fmax "
                        f"x{size['force_scale']:.4g} ({size['strength_rule']}); reference (assumed) "
                        f"{size['reference_height_m']:g} m, {size['reference_body_mass_kg']:g} kg")
    for column in ("segment", "between", "length (m)", "mass (kg)"):
        table.add_column(column)
    for seg in size["segments"]:
        table.add_row(seg["segment"], seg["between"], f"{seg['length_m']:.4f}", f"{seg['mass_kg']:.4f}")
    return table


@app.command("equilibrium")
def model_equilibrium(
    model_config: Annotated[Optional[Path], typer.Option(
        help="Model options TOML (see configs/model.toml); default: the published values.")] = None,
    out: Annotated[Optional[Path], typer.Option(
        help="Write the 298-value state as JSON (usable with 'hil simulate --initial').")] = None,
    start: Annotated[str, typer.Option(
        help="Initial guess: 'published' (the published equilibrium), 'mid-range' (every DOF at the "
             "middle of its range, a rough posture) or 'rounded' (published angles rounded to 5 deg).")
    ] = "published",
    json_out: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
) -> None:
    """Solve the passive equilibrium (zero excitation) and report posture, residual and GH force."""
    with user_errors():
        if out is not None:
            check_output_path(out, "--out", inputs=(model_config,))
        from sim.das3.equilibrium import solve_equilibrium
        from sim.das3.model import load_model

        model = load_model(load_model_options(model_config))
        q_published = np.asarray(model.equilibrium_state[: model.n_dof])
        guesses = {"published": None, "mid-range": model.dof_ranges.mean(axis=1),
                   "rounded": np.round(q_published / math.radians(5.0)) * math.radians(5.0)}
        if start not in guesses:
            raise BadInputError(f"--start must be one of {', '.join(guesses)}, not {start!r}")
        t0 = time.perf_counter()
        res = solve_equilibrium(model, x_guess=guesses[start])
        solve_s = time.perf_counter() - t0
        dq_published_deg = float(np.degrees(np.abs(res.x[: model.n_dof] - q_published)).max())
        if out is not None:
            write_state_json(out, res.x, (
                f"Passive equilibrium (zero excitation) from 'hil model equilibrium', fes-hil "
                f"{__version__}, model config {model_config or 'defaults'}; residual RMS "
                f"{res.residual_rms:.3g}. x = [q(11), qdot(11), s(138), a(138)], SI units, rad."))

    if json_out:
        q_deg = np.degrees(np.asarray(res.x[: len(model.dof_names)]))
        print_json({
            "q_deg": {name: float(v) for name, v in zip(model.dof_names, q_deg)},
            "residual_rms": float(res.residual_rms),
            "iterations": int(res.iterations),
            "start": start,
            "max_abs_dq_from_published_deg": dq_published_deg,
            "solve_time_s": solve_s,
            "gh_force_N_scapula": [float(v) for v in res.gh_force],
            "gh_theta_deg": math.degrees(res.gh_theta),
            "gh_phi_deg": math.degrees(res.gh_phi),
            "gh_stability": float(res.gh_stability),
            "out": None if out is None else str(out),
        })
        return
    _print_equilibrium(model, res, start, solve_s, dq_published_deg, out)


def _print_equilibrium(model, res, start: str, solve_s: float, dq_published_deg: float, out: Optional[Path]) -> None:
    q_deg = np.degrees(np.asarray(res.x[: len(model.dof_names)]))
    summary = key_value_table("Passive equilibrium (zero excitation)")
    for name, v in zip(model.dof_names, q_deg):
        summary.add_row(f"{name} (deg)", f"{v:.3f}")
    summary.add_row("residual RMS", f"{res.residual_rms:.3g}")
    summary.add_row("iterations", f"{res.iterations} from '{start}' ({solve_s:.2f} s)")
    summary.add_row("max |q - published| (deg)", f"{dq_published_deg:.2g}")
    summary.add_row("GH force (N, scapula frame)", "({:.2f}, {:.2f}, {:.2f})".format(*(float(v) for v in res.gh_force)))
    summary.add_row("glenoid angles (deg)", f"theta {math.degrees(res.gh_theta):.2f} (superior +), "
                                            f"phi {math.degrees(res.gh_phi):.2f}")
    summary.add_row("GH stability", f"{res.gh_stability:.3f} (-1 centred, 0 rim, > 0 outside)")
    if out is not None:
        summary.add_row("state written to", str(out))
    out_console().print(summary)


@app.command("muscle-curves")
def model_muscle_curves(
    muscle: Annotated[str, typer.Option(help="Muscle element, e.g. bicl (see 'hil model info').")],
    out: Annotated[Path, typer.Option(help="Output directory (created): muscle_curves_<muscle>.csv and .png.")],
) -> None:
    """One element's isometric force-length (a = 0 and 1), force-velocity and activation step response
    under each muscle model (das3, thelen2003), from the plant's own kernels."""
    from hil.reports.muscle_figure import muscle_curves, write_muscle_curves
    from sim.das3.config import MUSCLE_MODEL_NAMES
    from sim.das3.model import load_model

    with user_errors():
        models = {name: load_model(ModelConfig(muscle_model=name)) for name in MUSCLE_MODEL_NAMES}
        names = models["das3"].muscle_names
        if muscle not in names:
            raise BadInputError(f"--muscle {muscle!r}: not a muscle element (see 'hil model info')")
        out.mkdir(parents=True, exist_ok=True)
        path = write_muscle_curves(out, muscle, muscle_curves(models, names.index(muscle)), list(models))
    out_console().print(f"wrote {path}")


@app.command("engin-sinus")
def model_engin_sinus(
    out: Annotated[Path, typer.Option(help="Output directory (created): engin_sinus.csv and engin_sinus.png.")],
) -> None:
    """Engin's shoulder sinus and passive moment field (option shoulder_passive = "das3+engin"): a
    globographic plot in the torso-fixed axes, the map in Engin's modified joint axes (p, q) with the
    moment's contours and directions, and the torsion table; from the plant's own kernels."""
    from hil.reports.engin_figure import write_engin_sinus
    from sim.das3.model import load_model

    with user_errors():
        model = load_model(ModelConfig(shoulder_passive="das3+engin"))
        out.mkdir(parents=True, exist_ok=True)
        path = write_engin_sinus(out, model)
    out_console().print(f"wrote {path}")


@app.command("mtg-defaults")
def mtg_defaults(
    out: Annotated[Path, typer.Option(help="Where to write the parameter file (the shipped one is "
                                          "sim/data/mtg_default.json).")],
) -> None:
    """Derive the reduced MTG arm's default parameters from the DAS3 model (sim/mtg/defaults.py: maximum
    isometric moments, passive holding moments, Millard 2019 Table A.2) and print them per MTG."""
    import json

    from sim.das3.model import load_model
    from sim.mtg.defaults import derive_defaults

    with user_errors():
        check_output_path(out, "--out")
        doc = derive_defaults(load_model(ModelConfig()))
        write_output_text(out, json.dumps(doc, indent=1) + "\n")
    table = Table(title=f"MTG defaults -> {out}")
    for col in ("MTG", "coordinate", "u", "tau_o (N m)", "theta_o (deg)", "theta_w (deg)", "theta_0^PE (deg)",
                "theta_1^PE (deg)", "tact/tdeact (ms)"):
        table.add_column(col)
    for e in doc["mtgs"]:
        table.add_row(e["name"], e["coordinate"], f"{e['direction']:+d}", f"{e['tau_max_nm']:.1f}",
                      f"{e['theta_opt_deg']:.1f}", f"{e['theta_width_deg']:.1f}", f"{e['theta_pe0_deg']:.1f}",
                      f"{e['theta_pe1_deg']:.1f}", f"{e['tact_s'] * 1e3:.1f}/{e['tdeact_s'] * 1e3:.1f}")
    out_console().print(table)


@app.command("linearize")
def model_linearize(
    out: Annotated[Path, typer.Option(help="Where to write A, B, C, D and the rest: FILE.npz or FILE.mat.")],
    config: Annotated[Optional[Path], typer.Option(
        help="Service config: its plant (das3 or mtg), model options and patient, stimulation channels (--inputs "
             "channels) and loop period (the discrete forms); default: the published DAS3 model.")] = None,
    state: Annotated[Optional[Path], typer.Option(
        help="Operating state file (the plant's state: 298 values for DAS3, JSON or CSV as 'hil model equilibrium "
             "--out' writes); its activations are the operating excitations. Default: the plant's resting state "
             "(DAS3: the published passive equilibrium).")] = None,
    posture: Annotated[Optional[str], typer.Option(
        help="A posture held by the inputs, e.g. 'ELx=90' (deg): the rest state nearest it that the inputs hold.")
    ] = None,
    inputs: Annotated[str, typer.Option(
        help="excitations | groups | channels, optionally '=name,name' (e.g. channels=biceps,triceps).")
    ] = "excitations",
    channel_input: Annotated[str, typer.Option(
        help="Channel input variable: 'level' (r*phi, the recruitment inverted) or 'amplitude' (mA).")] = "level",
    pulse_width_us: Annotated[float, typer.Option(help="Pulse width of --channel-input amplitude (within the input "
                                                       "channels' limit).")] = 300.0,
    frequency_hz: Annotated[float, typer.Option(help="Pulse frequency of the channel inputs (within their "
                                                     "limits).")] = 40.0,
    outputs: Annotated[str, typer.Option(
        help="Comma list of q, qdot (all DOFs or q:ELx), th_angles, hand_position.")] = "q,qdot",
    reduce: Annotated[Optional[str], typer.Option(
        help="Also a reduced form keeping these DOFs (e.g. ELx) and the driven activations (residualisation).")
    ] = None,
    pade: Annotated[bool, typer.Option(
        help="Also the model with a first-order Pade delay per channel's electromechanical delay.")] = False,
    plant: Annotated[Optional[str], typer.Option(
        help="Override [plant] type: das3 (the full model) or mtg (the reduced muscle-torque-generator arm).")
    ] = None,
    patient: Annotated[Optional[str], typer.Option(
        help="The virtual patient (preset name or patient file) the arm is built for; replaces the config's "
             "[patient] table.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
) -> None:
    """The linear model x' = A dx + B du, y = C dx + D du of the config's plant at an equilibrium: the DAS3 arm from
    the exact Jacobians of its implicit form (A = -(df/dx')^-1 df/dx, B = -(df/dx')^-1 df/du), the MTG arm from
    central differences of its compiled forces; docs/analyses/linearize.md."""
    with user_errors():
        from hil.config import ConfigOverrides, load_service_config
        from hil.linearize import angles_deg, build, check_out, linearized_model, provenance, write
        from hil.patients import patient_override
        from hil.recording.files import load_model_state
        from hil.rt.plants import plant_type
        from sim.linear.operating import LinearizeError

        check_out(out)
        check_output_path(out, "--out", inputs=(state, config))
        if state is not None and posture is not None:
            raise LinearizeError("give --state or --posture, not both")
        cfg = None if config is None else ConfigOverrides(plant, patient_override(patient)).apply(
            load_service_config(config))
        model = linearized_model(plant, patient) if cfg is None else plant_type(cfg.plant.type).load_model(cfg)
        x_state = None if state is None else load_model_state(state, model)
        options = {"plant": plant, "patient": patient, "state": None if state is None else str(state),
                   "posture": posture, "inputs": inputs,
                   "channel_input": channel_input, "pulse_width_us": pulse_width_us, "frequency_hz": frequency_hz,
                   "outputs": outputs, "reduce": reduce, "pade": pade}
        lm, arrays = build(model, cfg, x_state=x_state, posture=posture, inputs=inputs, channel_input=channel_input,
                           pulse_width_us=pulse_width_us, frequency_hz=frequency_hz, outputs=outputs, reduce=reduce,
                           pade=pade, period_s=None if cfg is None else cfg.loop.period_s)
        write(out, arrays, provenance(model, config, options, lm))
    summary = {"out": str(out), "states": int(lm.A.shape[0]), "inputs": list(lm.input_names),
               "input_unit": lm.input_unit, "outputs": list(lm.output_names), "u0": lm.u0.tolist(),
               "plant": model.kind, "q0_deg": angles_deg(model, lm.x0),
               "residual_max": lm.residual_max, "residual_rms": lm.residual_rms,
               "max_real_eigenvalue": float(np.max(np.linalg.eigvals(lm.A).real)), "notes": lm.notes}
    if json_out:
        print_json(summary)
        return
    table = key_value_table(f"Linearised {model.kind.upper()} model")
    for key, value in summary.items():
        table.add_row(key, str(value))
    out_console().print(table)
