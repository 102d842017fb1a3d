"""Compare a trained policy (configs/gym/elbow-ppo.toml) with the built-in PID (configs/elbow-hold.toml) on the
run metrics of ``hil report`` (hil.reports.run_metrics): both hold the elbow at 90 deg from the resting posture,
offline, for ``--seconds``.

    python3 examples/gym/compare_with_pid.py [--policy-config configs/gym/elbow-ppo.toml] [--seconds 5] \
        [--figure docs/img/gym-ppo-vs-pid.png]
"""
from __future__ import annotations

import argparse
import json
import math

import numpy as np

from hil.config import load_service_config
from hil.reports.run_metrics import config_target, run_metrics
from hil.rt.offline import run_offline
from sim.das3.model import DOF_NAMES


class Ticks:
    """Keeps every tick record of a run."""

    def __init__(self) -> None:
        self.rows = []

    def on_tick(self, record, engine, actuation_ns) -> None:
        self.rows.append(record.copy())


def run(config: str, seconds: float):
    """(config, tick records) of an offline run."""
    cfg = load_service_config(config)
    keep = Ticks()
    run_offline(cfg, int(round(seconds / cfg.loop.period_s)), [keep])
    return cfg, np.concatenate(keep.rows)


def metrics(cfg, ticks) -> dict:
    names = [ch["name"] for ch in cfg.stimulation.get("channel", [])]
    m = run_metrics(ticks, cfg.loop.period_s, names, config_target(cfg, DOF_NAMES))
    t = m["tracking"]
    return {"rms_error_deg": math.degrees(t["rms_error_rad"]), "settling_time_s": t["settling_time_s"],
            "overshoot_deg": math.degrees(t["overshoot_rad"]), "final_error_deg": math.degrees(t["final_error_rad"]),
            "gh_unstable_ticks": m["gh_unstable_ticks"],
            "charge_uc": {k: round(v, 1) for k, v in m["charge_uc"].items() if v}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy-config", default="configs/gym/elbow-ppo.toml")
    parser.add_argument("--pid-config", default="configs/elbow-hold.toml")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--figure", help="PNG of both runs' elbow angle and biceps/triceps amplitude")
    args = parser.parse_args()
    runs = {"policy": run(args.policy_config, args.seconds), "pid": run(args.pid_config, args.seconds)}
    print(json.dumps({name: metrics(*r) for name, r in runs.items()}, indent=1))
    if args.figure:
        figure(runs, args.figure)


def figure(runs: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 5), sharex=True)
    for (name, (cfg, ticks)), colour in zip(runs.items(), ("tab:blue", "tab:orange")):
        t = (ticks["tick"] + 1) * cfg.loop.period_s
        label = "PPO policy" if name == "policy" else "PID"
        top.plot(t, np.degrees(ticks["frame"]["elbow_flexion"]), color=colour, label=label)
        bottom.plot(t, ticks["applied"][:, 3, 1], color=colour, label=f"{label}: biceps")
        bottom.plot(t, ticks["applied"][:, 4, 1], color=colour, ls="--", label=f"{label}: triceps")
    top.axhline(90.0, color="grey", lw=0.8)
    top.set_ylabel("elbow flexion (deg)")
    bottom.set_ylabel("amplitude (mA)")
    bottom.set_xlabel("time (s)")
    top.legend()
    bottom.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
