"""``hil model muscle-curves``: one muscle element's curves under each muscle model, as CSV and figure."""
from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from hil.reports.run_report import pyplot_agg, save_png
from sim.das3 import muscle_curves as mc
from sim.das3.model import MUS_LCEOPT, MUS_SEESLACK, Das3Model
from sim.output_file import output_file

FIBRE_RANGE = (0.4, 1.7)            # muscle-tendon length swept as slack + (this range) x L_CEopt
VELOCITIES = np.linspace(-10.0, 5.0, 61)   # L_CEopt/s, > 0 lengthening
STEP_ON_OFF_END_S = (0.0, 0.15, 0.4)


def muscle_curves(models: dict[str, Das3Model], muscle: int) -> dict:
    """Every curve of :mod:`sim.das3.muscle_curves` for each named model (same element in each)."""
    any_model = next(iter(models.values()))
    P = any_model.arrays.mus[muscle]
    rel = np.linspace(*FIBRE_RANGE, 53)
    lengths = P[MUS_SEESLACK] + P[MUS_LCEOPT] * rel
    out = {"length_rel": rel, "velocity": VELOCITIES}
    for name, model in models.items():
        t, a = mc.activation_step_response(model, muscle, *STEP_ON_OFF_END_S)
        out[name] = {"passive": mc.rest_force_length(model, muscle, lengths, 0.0),
                     "full": mc.rest_force_length(model, muscle, lengths, 1.0),
                     "velocity": mc.force_velocity(model, muscle, VELOCITIES), "t": t, "a": a}
    return out


def write_muscle_curves(out_dir: Path, muscle_name: str, curves: dict, names: list[str]) -> Path:
    """``muscle_curves_<name>.csv`` (force-length and force-velocity rows) and ``.png``; returns the PNG."""
    with output_file(out_dir / f"muscle_curves_{muscle_name}.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["curve", "x", *[f"{n}_N" for n in names]])
        for k, x in enumerate(curves["length_rel"]):
            w.writerow(["rest_a0", f"{x:.6g}", *[f"{curves[n]['passive'][k]:.6g}" for n in names]])
            w.writerow(["rest_a1", f"{x:.6g}", *[f"{curves[n]['full'][k]:.6g}" for n in names]])
        for k, v in enumerate(curves["velocity"]):
            w.writerow(["velocity_a1", f"{v:.6g}", *[f"{curves[n]['velocity'][k]:.6g}" for n in names]])
    path = out_dir / f"muscle_curves_{muscle_name}.png"
    _plot(path, muscle_name, curves, names)
    return path


def _plot(path: Path, muscle_name: str, curves: dict, names: list[str]) -> None:
    plt = pyplot_agg()
    fig, (fl, fv, act) = plt.subplots(1, 3, figsize=(14, 4.2))
    for k, name in enumerate(names):
        c = curves[name]
        color = f"C{k}"
        fl.plot(curves["length_rel"], c["full"], "-", color=color, label=f"{name}, a = 1")
        fl.plot(curves["length_rel"], c["passive"], "--", color=color, label=f"{name}, a = 0")
        fv.plot(curves["velocity"], c["velocity"], "-", color=color, label=name)
        act.plot(c["t"] * 1e3, c["a"], "-", color=color, label=name)
    fl.set_xlabel("(muscle-tendon length - tendon slack) / L_CEopt")
    fl.set_ylabel("tendon force at rest (N)")
    fv.set_xlabel("fibre velocity (L_CEopt/s, > 0 lengthening), fibre at L_CEopt")
    fv.set_ylabel("tendon force, a = 1 (N)")
    act.set_xlabel(f"time (ms); excitation 1 from {STEP_ON_OFF_END_S[0] * 1e3:g} to {STEP_ON_OFF_END_S[1] * 1e3:g} ms")
    act.set_ylabel("activation")
    fl.set_title(f"{muscle_name}: isometric force-length", fontsize=9)
    fv.set_title("force-velocity", fontsize=9)
    act.set_title("activation dynamics", fontsize=9)
    for ax in (fl, fv, act):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    save_png(plt, fig, str(path))
