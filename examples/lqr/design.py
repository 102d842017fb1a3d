"""Design the elbow LQR of examples/lqr/lqr_elbow.py from the linearised plant (docs/analyses/linearize.md): the DAS3
arm of configs/elbow-lqr.toml (biceps and triceps channels) and the reduced MTG arm of configs/elbow-lqr-mtg.toml
(elbow flexor and extensor channels).

1. Operating point: the rest state with the elbow at the target, held by the flexor channel alone (levels r*phi,
   ``sim.linear.operating.hold_posture``); the extensor channel at level 0.
2. Linear model there with the flexor and extensor channel levels as inputs (``hil.linearize``), reduced by
   residualisation to the elbow angle and velocity (every other state, activations included, quasi-static).
3. LQR with integral action (LQI) on the reduced model discretised by zero-order hold at the controller period:
   z = [integral of (q - q0), q - q0, qdot], u = -K z, K from the discrete Riccati equation
   (scipy.linalg.solve_discrete_are). Weights by Bryson's rule (Franklin, Powell & Emami-Naeini, Feedback Control
   of Dynamic Systems, §9.5.2): Q_ii = 1 / (largest acceptable z_i)^2, R_jj = 1 / (largest acceptable level change)^2.

Run from the repository root: ``python3 examples/lqr/design.py`` (writes examples/lqr/elbow_lqr_gain.json and
elbow_lqr_gain_mtg.json).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from scipy.linalg import solve_discrete_are

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from hil.config import load_service_config  # noqa: E402
from hil.linearize import angles_deg, channel_inputs, stimulation_model  # noqa: E402
from hil.rt.plants import plant_type  # noqa: E402
from sim.linear.operating import dof_states, hold_posture, linearize, parse_posture  # noqa: E402
from sim.linear.reduce import frequency_response, relative_error, residualize, zoh  # noqa: E402

CONFIG = ROOT / "configs/elbow-lqr.toml"
DESIGNS = {CONFIG: Path(__file__).with_name("elbow_lqr_gain.json"),
           ROOT / "configs/elbow-lqr-mtg.toml": Path(__file__).with_name("elbow_lqr_gain_mtg.json")}
TARGET_DEG = 90.0
CHANNELS = {"das3": ("biceps", "triceps"), "mtg": ("elbow_flexor", "elbow_extensor")}
"""The flexor and extensor channel of each plant's stimulation map."""
PERIOD_S = 0.02                    # the plug-in's call period (rate_hz = 50)
PULSE_WIDTH_US, FREQUENCY_HZ = 300.0, 40.0
MAX_INTEGRAL, MAX_ERROR, MAX_VELOCITY = 0.02, 0.03, 0.4     # rad s, rad, rad/s (Bryson's rule, proposals)
MAX_LEVEL_CHANGE = 0.3


def design(config=CONFIG, target_deg: float = TARGET_DEG) -> dict:
    cfg = load_service_config(config)
    model = plant_type(cfg.plant.type).load_model(cfg)
    stim = stimulation_model(cfg, model)
    flexor, extensor = CHANNELS[model.kind]
    elbow = parse_posture(model, f"ELx={target_deg}")
    x0, v_flexor = hold_posture(model, channel_inputs(stim, [flexor], FREQUENCY_HZ), elbow)
    both = channel_inputs(stim, [flexor, extensor], FREQUENCY_HZ)
    lm = linearize(model, x0, both, np.array([v_flexor[0], 0.0]), "q:ELx,qdot:ELx")
    Ar, Br, Cr, Dr = residualize(lm.A, lm.B, lm.C, lm.D, dof_states(model, ["ELx"]))
    w = np.logspace(-1, 2, 200)                              # rad/s
    err = relative_error(frequency_response(lm.A, lm.B, lm.C, lm.D, w), frequency_response(Ar, Br, Cr, Dr, w))
    Ad, Bd = zoh(Ar, Br, PERIOD_S)
    Az = np.block([[np.eye(1), PERIOD_S * np.eye(1, 2)], [np.zeros((2, 1)), Ad]])   # z_k+1 = z_k + T e_k
    Bz = np.vstack([np.zeros((1, 2)), Bd])
    Q = np.diag([1 / MAX_INTEGRAL ** 2, 1 / MAX_ERROR ** 2, 1 / MAX_VELOCITY ** 2])
    R = np.eye(2) / MAX_LEVEL_CHANGE ** 2
    P = solve_discrete_are(Az, Bz, Q, R)
    K = np.linalg.solve(R + Bz.T @ P @ Bz, Bz.T @ P @ Az)
    poles = np.linalg.eigvals(Az - Bz @ K)
    chans = {ch.name: ch for ch in stim.channels}
    return {
        "plant": model.kind, "target_deg": target_deg, "period_s": PERIOD_S, "channels": [flexor, extensor],
        "level0": [float(v) for v in lm.u0], "K": K.tolist(),
        "state": ["integral of (q_ELx - target) (rad s)", "q_ELx - target (rad)", "qdot_ELx (rad/s)"],
        "pulse_width_us": PULSE_WIDTH_US, "frequency_hz": FREQUENCY_HZ,
        "recruitment": {n: {"threshold_charge_c": chans[n].threshold_charge_c,
                            "saturation_charge_c": chans[n].saturation_charge_c,
                            "phi": float(both.upper[i])} for i, n in enumerate([flexor, extensor])},
        "A_reduced": Ar.tolist(), "B_reduced": Br.tolist(), "Q_diag": np.diag(Q).tolist(), "R_diag": np.diag(R).tolist(),
        "A_z": Az.tolist(), "B_z": Bz.tolist(), "P": P.tolist(),
        "reduction_error_0.1_100_rad_s": err, "closed_loop_poles_abs": sorted(float(abs(p)) for p in poles),
        "model_data_sha256": model.data_sha256, "residual_max": lm.residual_max,
        "q0_deg": {k: round(v, 4) for k, v in angles_deg(model, x0).items()},
    }


if __name__ == "__main__":
    for config, out in DESIGNS.items():
        doc = design(config)
        out.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {out}: K = {np.round(doc['K'], 3).tolist()}, level0 = {np.round(doc['level0'], 4).tolist()}, "
              f"reduction error {doc['reduction_error_0.1_100_rad_s']:.3g}, |closed-loop poles| "
              f"{np.round(doc['closed_loop_poles_abs'], 3).tolist()}")
