"""``imu-allan.csv`` and ``imu-allan.png``: the Allan deviation of a resting lab IMU's gyro (:mod:`hil.rt.lab_sensors`),
simulated by the tick's own noise kernel, against the datasheet's noise density and bias stability."""
from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

from hil.reports.run_report import pyplot_agg, save_png
from hil.rt.lab_sensors import GM_PEAK_TAU, ImuConfig, LabSensors, LabSensorsConfig, gyro_record
from sim.output_file import output_file

DEG_PER_H = math.radians(1.0) / 3600.0


def allan_deviation(rate: np.ndarray, fs: float, clusters: np.ndarray) -> np.ndarray:
    """Overlapping Allan deviation (IEEE Std 952-1997) of a rate record sampled at ``fs`` for cluster sizes
    ``clusters`` (tau = m / fs): sigma^2(tau) = <(theta_(k+2m) - 2 theta_(k+m) + theta_k)^2> / (2 tau^2),
    theta the integrated rate."""
    theta = np.concatenate(([0.0], np.cumsum(rate))) / fs
    out = np.empty(len(clusters))
    for i, m in enumerate(clusters):
        d = theta[2 * m:] - 2.0 * theta[m:-m] + theta[:-2 * m]
        out[i] = math.sqrt(float(np.mean(d * d)) / (2.0 * (m / fs) ** 2))
    return out


def simulate_gyro(imu: ImuConfig, hours: float, seed: int = 0) -> np.ndarray:
    """(n, 3) rad/s: ``hours`` of a resting IMU's gyro at its rate, its bias started stationary."""
    sensors = LabSensors(LabSensorsConfig(imu=imu), seed)
    params = sensors.imu_params(imu, 1.0 / imu.rate_hz, 0)
    bias = np.zeros((2, 3))
    sensors.imu = (params, *sensors.imu[1:4], bias, *sensors.imu[5:])
    sensors.reset()
    out = np.zeros((int(hours * 3600.0 * imu.rate_hz), 3))
    gyro_record(params, sensors.rng, bias, out)
    return out


def write_imu_allan(out_dir: Path, imu: ImuConfig, hours: float = 4.0, seed: int = 0) -> tuple[Path, Path, dict]:
    """The Allan deviation of each gyro axis over log-spaced tau (CSV, deg/h) and its figure with the datasheet's
    N / sqrt(tau) line and bias-stability level; returns the paths and the read-outs (N at 1 s, deg/s/sqrt(Hz);
    the level at 1.89 T, deg/h)."""
    fs = imu.rate_hz
    record = simulate_gyro(imu, hours, seed)
    clusters = np.unique(np.round(np.logspace(0, math.log10(record.shape[0] / 10), 60)).astype(int))
    tau = clusters / fs
    adev = np.stack([allan_deviation(record[:, i], fs, clusters) for i in range(3)])
    csv_path, png_path = out_dir / "imu-allan.csv", out_dir / "imu-allan.png"
    with output_file(csv_path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["tau_s", "adev_x_deg_h", "adev_y_deg_h", "adev_z_deg_h"])
        for k, t in enumerate(tau):
            w.writerow([f"{t:.6g}", *(f"{a / DEG_PER_H:.6g}" for a in adev[:, k])])
    peak = round(GM_PEAK_TAU * imu.gyro_bias_correlation_s * fs)
    readout = {"noise_density_deg_s_rthz": math.degrees(np.mean([allan_deviation(record[:, i], fs, [round(fs)])[0]
                                                                 for i in range(3)])),
               "level_at_peak_deg_h": float(np.mean([allan_deviation(record[:, i], fs, [peak])[0]
                                                     for i in range(3)])) / DEG_PER_H}
    plt = pyplot_agg()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, axis in enumerate("xyz"):
        ax.loglog(tau, adev[i] / DEG_PER_H, label=f"gyro {axis}", alpha=0.8)
    ax.loglog(tau, math.degrees(imu.gyro_noise) * 3600.0 / np.sqrt(tau), "k--", lw=1,
              label=f"N / sqrt(tau), N = {math.degrees(imu.gyro_noise):g} deg/s/sqrt(Hz)")
    ax.axhline(imu.gyro_bias_instability / DEG_PER_H, color="k", ls=":", lw=1,
               label=f"bias stability {imu.gyro_bias_instability / DEG_PER_H:g} deg/h")
    ax.set_xlabel("cluster time tau (s)")
    ax.set_ylabel("Allan deviation (deg/h)")
    ax.set_title(f"{imu.model}: {hours:g} h at {fs:g} Hz, Gauss-Markov bias T = {imu.gyro_bias_correlation_s:g} s")
    ax.grid(which="both", alpha=0.3)
    ax.legend(fontsize=8)
    save_png(plt, fig, str(png_path))
    return csv_path, png_path, readout
