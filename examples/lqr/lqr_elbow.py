"""An LQR controller plug-in (drivers.controllers.plugin) that holds the elbow with a flexor and an extensor channel,
its gain designed from the linearised arm by examples/lqr/design.py (docs/analyses/linearize.md), and a
model-predictive one on the same model (:class:`MpcElbow`, configs/elbow-mpc.toml).

Each call: z = [integral of e, e, qdot_ELx] with e = elbow - target; levels l = l0 - K z, clipped to [0, phi]; each
level becomes an amplitude by inverting the recruitment curve l = phi (3 x^2 - 2 x^3), x = (PW I - Q_th) / (Q_sat -
Q_th) (hil.rt.stimulation), x = 1/2 - sin(asin(1 - 2 l/phi) / 3), which removes the threshold dead zone. The integral
runs only while |e| < integration_band_deg and no level is at its top phi (conditional integration, an anti-windup:
Astrom & Hagglund, Advanced PID Control, 2006, §3.5; a level clipped at 0 is the pair's normal flexor/extensor split).

    [[driver]]
    type = "loopback"
    controller = "../examples/lqr/lqr_elbow.py:LqrElbow"
    gain_file = "../examples/lqr/elbow_lqr_gain.json"    # relative to the config file
    target_deg = 90             # the design's target (another one is reached by the integral action)
    flexor_channel = 4
    extensor_channel = 5
"""
from __future__ import annotations

import json
import math
import os

import numpy as np

from drivers.controllers.plugin import ChannelCommand, Controller


def amplitude_ma(level: float, rec: dict, pulse_width_s: float) -> float:
    """The amplitude (mA) whose recruitment gives ``level`` (0 for level 0)."""
    r = min(1.0, max(0.0, level / rec["phi"]))
    if r <= 0.0:
        return 0.0
    x = 0.5 - math.sin(math.asin(1.0 - 2.0 * r) / 3.0)
    charge = rec["threshold_charge_c"] + x * (rec["saturation_charge_c"] - rec["threshold_charge_c"])
    return charge / pulse_width_s * 1e3


class LqrElbow(Controller):
    max_commands = 2

    def reset(self, settings):
        super().reset(settings)
        p = dict(settings.params)
        path = os.path.join(settings.base_dir, str(p.pop("gain_file")))
        with open(path, encoding="utf-8") as fh:
            g = json.load(fh)
        self.flexor = int(p.pop("flexor_channel"))
        self.extensor = int(p.pop("extensor_channel"))
        self.max_amp = float(p.pop("max_amplitude_ma", 80.0))
        self.band = math.radians(float(p.pop("integration_band_deg", 5.0)))
        self.target = math.radians(float(p.pop("target_deg", g["target_deg"])))   # the design's by default
        n = len(settings.channel_names)
        if not 1 <= self.flexor <= n or not 1 <= self.extensor <= n:
            raise ValueError(f"channels are 1..{n}")
        self.K = np.array(g["K"], float)
        self.level0 = np.array(g["level0"], float)
        self.rec = [g["recruitment"][c] for c in g["channels"]]
        self.top = np.array([r["phi"] for r in self.rec])
        self.pw_us, self.freq = float(g["pulse_width_us"]), float(g["frequency_hz"])
        self.elbow = settings.dof_names.index("ELx")
        self.dt = settings.call_period_s
        self.integral = 0.0
        self.amps = [0.0, 0.0]
        self.configure(p, g)
        if p:
            raise ValueError(f"unknown parameter(s) {sorted(p)}")

    def configure(self, params: dict, gain: dict) -> None:
        """A subclass's own keys (popped from ``params``) and set-up; the LQR has none."""

    def plan(self, z: np.ndarray) -> np.ndarray:
        """The levels wanted for the state z (clipped to [0, phi] after): v0 - K z."""
        return self.level0 - self.K @ z

    def step(self, tick, time_s, frame):
        if frame is None:
            return []
        e = float(frame["elbow_flexion"][0]) - self.target
        z = np.array([self.integral, e, float(frame["qdot"][0][self.elbow])])
        want = self.plan(z)
        levels = np.clip(want, 0.0, self.top)
        if abs(e) < self.band and np.all(want < self.top):    # clipping at 0 is the pair's normal split
            self.integral += e * self.dt
        self.amps = [min(self.max_amp, amplitude_ma(float(lv), r, self.pw_us * 1e-6)) for lv, r in zip(levels, self.rec)]
        return [ChannelCommand(self.flexor, self.pw_us, self.amps[0], self.freq),
                ChannelCommand(self.extensor, self.pw_us, self.amps[1], self.freq)]

    def state(self):
        return {"integral_rad_s": self.integral, "flexor_amplitude_ma": self.amps[0],
                "extensor_amplitude_ma": self.amps[1]}


class MpcElbow(LqrElbow):
    """Model-predictive control of the same z = [integral of e, e, qdot_ELx] on the LQR's own design model (the gain
    file's A_z, B_z: the reduced model held over each call, with the integral) and weights Q, R: each call minimises

        sum_{k<N} (z_k' Q z_k + dv_k' R dv_k) + z_N' P z_N,   0 <= v0 + dv_k <= phi   (every k)

    over the next N = ``horizon`` calls' level changes dv, P the discrete Riccati solution of the LQR design, and
    sends the first (receding horizon: Rawlings, Mayne & Diehl, Model Predictive Control, 2nd ed. 2017, ch. 1-2).
    With no bound active its first move is the LQR's -K z exactly (the terminal cost is the infinite horizon's);
    a bound is planned for rather than clipped. Condensed, with Z = Phi z0 + Gamma U, the problem is the bounded
    least squares |L U + L^-T F z0|^2, H = Gamma' Qbar Gamma + Rbar = L'L, F = Gamma' Qbar Phi
    (``scipy.optimize.lsq_linear``, bounded-variable least squares).

        horizon = 10                # calls (10 x 0.02 s)
    """

    def configure(self, params: dict, gain: dict) -> None:
        from scipy.linalg import cholesky, solve_triangular

        n = int(params.pop("horizon", 10))
        if not 1 <= n <= 200:
            raise ValueError(f"horizon is 1..200 calls, not {n}")
        Az, Bz, P = (np.array(gain[key], float) for key in ("A_z", "B_z", "P"))
        Q, R = np.diag(gain["Q_diag"]), np.diag(gain["R_diag"])
        powers = [np.linalg.matrix_power(Az, k) for k in range(n + 1)]
        Phi = np.vstack(powers[1:])
        Gamma = np.zeros((3 * n, 2 * n))
        for row in range(n):
            for col in range(row + 1):
                Gamma[3 * row:3 * row + 3, 2 * col:2 * col + 2] = powers[row - col] @ Bz
        Qbar = np.kron(np.eye(n), Q)
        Qbar[-3:, -3:] = P
        H = Gamma.T @ Qbar @ Gamma + np.kron(np.eye(n), R)
        self.L = cholesky(H)
        self.M = solve_triangular(self.L, Gamma.T @ Qbar @ Phi, trans="T")
        self.bounds = (np.tile(-self.level0, n), np.tile(self.top - self.level0, n))

    def plan(self, z: np.ndarray) -> np.ndarray:
        from scipy.optimize import lsq_linear

        plan = lsq_linear(self.L, -(self.M @ z), bounds=self.bounds, method="bvls", tol=1e-12)
        return self.level0 + plan.x[:2]
