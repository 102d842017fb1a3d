"""The figures and numbers of docs/analyses/linearize.md: the linear model against small steps of the nonlinear
plant, the reduced forms' frequency responses, and the LQR plug-in against the PID of configs/elbow-hold.toml.

Run from the repository root: ``python3 examples/lqr/figures.py [OUTDIR]`` (default docs/img); prints the numbers.
"""
from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from hil.config import load_service_config  # noqa: E402
from hil.linearize import channel_inputs, stimulation_model  # noqa: E402
from hil.reports.run_metrics import tracking  # noqa: E402
from hil.rt.offline import run_offline  # noqa: E402
from sim.das3.model import load_model  # noqa: E402
from sim.das3.plant import Plant  # noqa: E402
from sim.linear.das3 import IA  # noqa: E402
from sim.linear.operating import dof_states, hold_posture, linear_view, linearize  # noqa: E402
from sim.linear.reduce import frequency_response, relative_error, residualize, step_response  # noqa: E402

ELX = 9


def plant_step(model, x0, u0, u1, seconds, dt=0.001):
    plant = Plant(model, step_s=dt, initial_state=x0)
    plant.reset(x0, excitation=u0)
    out = []
    for _ in range(round(seconds / dt)):
        plant.step(u1)
        out.append(plant.x[ELX] - x0[ELX])
    return np.array(out)


def step_validation(model, stim, out_dir):
    inp = channel_inputs(stim, ["biceps"], 40.0)
    t0 = time.perf_counter()
    x0, v0 = hold_posture(model, inp, {ELX: math.radians(90.0)})
    t_hold = time.perf_counter() - t0
    t0 = time.perf_counter()
    lm = linearize(model, x0, inp, v0)
    t_lin = time.perf_counter() - t0
    print(f"hold posture {t_hold:.2f} s, linearize {t_lin:.3f} s, level0 {v0[0]:.4f}, residual {lm.residual_max:.2g}")
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.6))
    T, dt = 0.5, 0.001
    t = np.arange(1, round(T / dt) + 1) * dt
    for dv in (0.002, 0.01, 0.05):
        y = plant_step(model, x0, lm.excitation0, inp.excitation(v0 + dv)[0], T)
        yl = step_response(lm.A, lm.B, lm.C, lm.D, dt, y.size, [dv])[1:, ELX]
        err = np.max(np.abs(y - yl)) / np.max(np.abs(y))
        print(f"held 90 deg, biceps level step {dv}: elbow {math.degrees(y[-1]):.3f} deg at {T} s, linear "
              f"{math.degrees(yl[-1]):.3f}, max rel error {err:.4f}")
        ax[0].plot(t, np.degrees(y), label=f"plant, dl = {dv}")
        ax[0].plot(t, np.degrees(yl), "--", color=ax[0].lines[-1].get_color(), label=f"linear, error {100 * err:.1f} %")
    ax[0].set(xlabel="time (s)", ylabel="elbow change (deg)", title="Held at 90 deg (biceps level step)")
    ax[0].legend(fontsize=7)
    xr = np.array(model.equilibrium_state)
    lr = linearize(model, xr, inp, np.zeros(1))
    for dv in (0.0005, 0.005, 0.05):
        y = plant_step(model, xr, lr.excitation0, inp.excitation(np.array([dv]))[0], T)
        yl = step_response(lr.A, lr.B, lr.C, lr.D, dt, y.size, [dv])[1:, ELX]
        err = np.max(np.abs(y - yl)) / np.max(np.abs(y))
        print(f"passive equilibrium, biceps level step {dv}: max rel error {err:.3f}")
        ax[1].plot(t, np.degrees(y) / dv, label=f"plant / dl, dl = {dv}")
    ax[1].plot(t, np.degrees(yl) / dv, "k--", label="linear / dl")
    ax[1].set(xlabel="time (s)", ylabel="elbow change per level (deg)", title="Passive equilibrium (a = 0)")
    ax[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out_dir / "linearize_step.png", dpi=110)
    return x0, v0


def reduction(model, stim, x0, v0, out_dir):
    inp = channel_inputs(stim, ["biceps", "triceps"], 40.0)
    lm = linearize(model, x0, inp, np.array([v0[0], 0.0]), "q:ELx,qdot:ELx")
    driven = linear_view(model).driven_states(lm.B)          # fibre states, then activations
    act = [i for i in driven if i >= IA]
    elbow = dof_states(model, ["ELx"])
    forms = {"full (298 states)": (lm.A, lm.B, lm.C, lm.D),
             f"ELx + driven s, a ({2 + len(driven)})": residualize(lm.A, lm.B, lm.C, lm.D, elbow + driven),
             f"ELx + driven a ({2 + len(act)})": residualize(lm.A, lm.B, lm.C, lm.D, elbow + act),
             "ELx only (2, the LQR design model)": residualize(lm.A, lm.B, lm.C, lm.D, elbow)}
    w = np.logspace(-1, 2.5, 300)
    G = frequency_response(*forms["full (298 states)"], w)
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.6))
    for name, m in forms.items():
        Gr = frequency_response(*m, w)
        y = step_response(*m, 0.002, 250, [0.01, 0.0])[:, 0]
        yf = step_response(*forms["full (298 states)"], 0.002, 250, [0.01, 0.0])[:, 0]
        print(f"{name}: freq error (q, biceps; 0.1-316 rad/s) {relative_error(G[:, :1, :1], Gr[:, :1, :1]):.4f}, "
              f"all outputs/inputs {relative_error(G, Gr):.4f}; step error {np.max(np.abs(y - yf)) / np.max(np.abs(yf)):.4f}")
        ax[0].loglog(w, np.abs(Gr[:, 0, 0]), label=name)
        ax[1].plot(np.arange(251) * 0.002, np.degrees(y), label=name)
    ax[0].set(xlabel="w (rad/s)", ylabel="|elbow / biceps level| (rad)", title="Frequency response")
    ax[1].set(xlabel="time (s)", ylabel="elbow (deg)", title="Step of the biceps level by 0.01")
    ax[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out_dir / "linearize_reduction.png", dpi=110)


class Elbow:
    def __init__(self):
        self.angle = []

    def on_tick(self, record, engine, actuation_ns):
        self.angle.append(float(record[0]["frame"]["elbow_flexion"]))


ARMS = {"DAS3 arm": ("elbow-lqr.toml", "elbow-mpc.toml", "elbow-hold.toml"),
        "MTG arm": ("elbow-lqr-mtg.toml", "elbow-mpc-mtg.toml", "elbow-hold-mtg.toml")}
"""Each arm's LQR, MPC and PID configs."""


def lqr_vs_pid(out_dir):
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
    for ax, (arm, configs) in zip(axes, ARMS.items()):
        for kind, cfg_name in zip(("LQR", "MPC", "PID"), configs):
            name = f"{kind} (configs/{cfg_name})"
            cfg = load_service_config(ROOT / "configs" / cfg_name)
            keep = Elbow()
            run_offline(cfg, round(5.0 / cfg.loop.period_s), [keep])
            a = np.array(keep.angle)
            m = tracking(a, math.radians(90.0), cfg.loop.period_s)
            print(f"{name}: settling {m['settling_time_s']} s, overshoot {math.degrees(m['overshoot_rad']):.2f} deg, "
                  f"RMS error {math.degrees(m['rms_error_rad']):.2f} deg, final error "
                  f"{math.degrees(m['final_error_rad']):.4f} deg")
            ax.plot(np.arange(a.size) * cfg.loop.period_s, np.degrees(a), label=name)
        ax.axhline(90.0, color="k", lw=0.5)
        ax.set(xlabel="time (s)", title=f"Holding the elbow at 90 deg, {arm} (offline run)", xlim=(0.0, 2.0))
        ax.legend(fontsize=8)
    axes[0].set(ylabel="elbow flexion (deg)")
    fig.tight_layout()
    fig.savefig(out_dir / "lqr_vs_pid.png", dpi=110)


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs/img"
    out.mkdir(parents=True, exist_ok=True)
    cfg = load_service_config(ROOT / "configs/elbow-lqr.toml")
    model = load_model(cfg.model)
    stim = stimulation_model(cfg, model)
    x0, v0 = step_validation(model, stim, out)
    reduction(model, stim, x0, v0, out)
    lqr_vs_pid(out)
