"""Files of ``hil analyze``: static-optimisation and feed-forward results as CSV, JSON and PNG (maximum
moments: :mod:`hil.reports.max_moment_output`).

Angles in the files are degrees (columns end in ``_deg``), moments N m, forces N.
"""
from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np

from hil.reports.run_report import glenoid_angles, pyplot_agg, save_png
from sim.analysis.static_opt import CRITERION_UNITS, StaticSolution
from sim.das3.layout import GIRDLE_NAMES
from sim.das3.model import MUS_FMAX
from sim.das3.muscle_groups import group_members
from sim.output_file import output_file, write_output_text

GIRDLE_COLUMNS = tuple(f"{name}_deg" for name in GIRDLE_NAMES)


def checks_dict(sol: StaticSolution) -> dict:
    c = sol.checks
    return {"passed": c.passed, "failures": c.failures, "eom_residual_max_Nm": c.eom_max_nm,
            "contraction_residual_max": c.contraction_max, "posture_error_max_deg": math.degrees(c.posture_max_rad),
            "gh_stability": c.gh_stability, "contact_E_TS": float(c.contact_e[0]), "contact_E_AI": float(c.contact_e[1]),
            "activation_min": c.activation_range[0], "activation_max": c.activation_range[1],
            "joint_outside_range_deg": math.degrees(c.joint_outside_rad)}


def solution_dict(sol: StaticSolution, model) -> dict:
    """Everything of one solution but the per-muscle values (see :func:`write_muscles`)."""
    return {
        "criterion": sol.criterion, "cost": sol.cost, "cost_units": CRITERION_UNITS.get(sol.criterion, "N m"),
        "joint_angles_deg": dict(zip(model.dof_names, np.degrees(sol.x[:11]).round(6).tolist())),
        "thoracohumeral_deg": dict(zip(("plane_of_elevation", "elevation", "axial_rotation"),
                                       np.degrees(sol.th_angles).round(6).tolist())),
        "gh_force_N": sol.gh_force.tolist(), "gh_theta_deg": math.degrees(sol.gh_angles[0]),
        "gh_phi_deg": math.degrees(sol.gh_angles[1]), "gh_stability": sol.gh_stability,
        "contact_force_N": {"TS": sol.contact_force[0].tolist(), "AI": sol.contact_force[1].tolist()},
        "conoid_force_N": sol.conoid_force.tolist(), "external_moments_Nm": sol.moments.tolist(),
        "active_constraints": sol.active, "iterations": sol.iterations, "solve_time_s": sol.time_s,
        "checks": checks_dict(sol),
    }


def write_muscles(path: Path, sol: StaticSolution, model) -> None:
    with output_file(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["muscle", "activation", "force_N", "force_per_Fmax"])
        fmax = model.arrays.mus[:, MUS_FMAX]
        for name, a, f, fm in zip(model.muscle_names, sol.activation, sol.force, fmax):
            w.writerow([name, f"{a:.9g}", f"{f:.9g}", f"{f / fm:.9g}"])


def write_solution(out_dir: Path, sol: StaticSolution, model) -> None:
    """``solution.json``, ``muscles.csv`` and ``static_opt.png`` for one posture."""
    write_output_text(out_dir / "solution.json", json.dumps(solution_dict(sol, model), indent=2) + "\n")
    write_muscles(out_dir / "muscles.csv", sol, model)
    plot_solution(out_dir / "static_opt.png", sol, model)


def _rim(ax, model) -> None:
    ta, pa = model.arrays.gh_rim
    e = np.linspace(0, 2 * math.pi, 200)
    ax.plot(np.degrees(pa * np.cos(e)), np.degrees(ta * np.sin(e)), "k-", label="glenoid rim")
    ax.set_xlabel("phi, anterior-posterior (deg)")
    ax.set_ylabel("theta, superior (+) / inferior (deg)")
    ax.set_aspect("equal")


def _legend_below(gx) -> None:
    """The glenoid's legend above its axes, where it cannot cover the GH force marker or the rim."""
    gx.legend(fontsize=8, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=2, frameon=False)


def plot_solution(path: Path, sol: StaticSolution, model, top: int = 20) -> None:
    """``static_opt.png``: solution_figure written to ``path``."""
    plt = pyplot_agg()
    save_png(plt, solution_figure(plt, sol, model, top), path)


def solution_figure(plt, sol: StaticSolution, model, top: int = 20):
    """The most active muscles (activation and force / Fmax) and the GH force in the glenoid."""
    fig, (ax, gx) = plt.subplots(1, 2, figsize=(12, 5), gridspec_kw={"width_ratios": [2, 1]})
    order = np.argsort(-sol.activation)[:top]
    y = np.arange(len(order))
    ax.barh(y, sol.activation[order], label="activation")
    ax.barh(y, sol.force[order] / model.arrays.mus[order, MUS_FMAX], height=0.35, label="force / Fmax")
    ax.set_yticks(y, [model.muscle_names[i] for i in order], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("activation, force / Fmax")
    ax.legend(loc="lower right")
    th = np.degrees(sol.th_angles)
    ax.set_title(f"criterion ({sol.criterion}) at plane {th[0]:.0f} deg, elevation {th[1]:.0f} deg")
    _rim(gx, model)
    gx.plot(math.degrees(sol.gh_angles[1]), math.degrees(sol.gh_angles[0]), "ro",
            label=f"GH force (stability {sol.gh_stability:+.2f})")
    _legend_below(gx)
    return fig


TRAJECTORY_COLUMNS = ("plane_deg", "elevation_deg", "axial_rotation_deg", "criterion", "cost", "gh_stability",
                      "gh_theta_deg", "gh_phi_deg", *GIRDLE_COLUMNS, "iterations", "solve_time_s",
                      "checks_passed", "failures")


def trajectory_row(sol: StaticSolution) -> list:
    c = sol.checks
    return [*np.degrees(sol.th_angles).round(6), sol.criterion, f"{sol.cost:.9g}", f"{sol.gh_stability:.6f}",
            f"{math.degrees(sol.gh_angles[0]):.4f}", f"{math.degrees(sol.gh_angles[1]):.4f}",
            *np.degrees(sol.x[:6]).round(4), sol.iterations, f"{sol.time_s:.3f}", c.passed, "; ".join(c.failures)]


def write_trajectory(out_dir: Path, sols: list, model) -> None:
    """``trajectory.csv`` (one row per posture), ``activations.csv`` and ``forces.csv`` (postures x
    muscles) and ``trajectory.png`` (forces of the strongest muscle groups vs elevation and the GH force
    path in the glenoid, in the manner of van der Helm 1994 Figs. 7-8)."""
    with output_file(out_dir / "trajectory.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(TRAJECTORY_COLUMNS)
        w.writerows(trajectory_row(s) for s in sols)
    for name, values in (("activations.csv", [s.activation for s in sols]), ("forces.csv", [s.force for s in sols])):
        with output_file(out_dir / name, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["elevation_deg", *model.muscle_names])
            w.writerows([f"{math.degrees(s.th_angles[1]):.4f}", *(f"{v:.6g}" for v in row)]
                        for s, row in zip(sols, values))
    plot_trajectory(out_dir / "trajectory.png", sols, model)


def plot_trajectory(path: Path, sols: list, model, n_groups: int = 8) -> None:
    plt = pyplot_agg()
    elevation = np.degrees([s.th_angles[1] for s in sols])
    forces = np.array([s.force for s in sols])
    groups = group_members(model.muscle_names)
    totals = {g: forces[:, idx].sum(axis=1) for g, idx in groups.items()}
    strongest = sorted(totals, key=lambda g: -totals[g].max())[:n_groups]
    fig, (ax, gx) = plt.subplots(1, 2, figsize=(13, 5), gridspec_kw={"width_ratios": [2, 1]})
    for g in strongest:
        ax.plot(elevation, totals[g], "o-", ms=3, label=g)
    ax.set_xlabel("thoracohumeral elevation (deg)")
    ax.set_ylabel("muscle force, sum over elements (N)")
    ax.set_title(f"criterion ({sols[0].criterion})")
    ax.legend(ncol=2, fontsize=8)
    ax.grid(alpha=0.3)
    _rim(gx, model)
    gh = np.array([s.gh_force for s in sols])
    theta, phi = glenoid_angles(gh, model.arrays.glenoid)
    gx.plot(np.degrees(phi), np.degrees(theta), "r.-", label="GH force")
    _legend_below(gx)
    save_png(plt, fig, path)


def write_feedforward(out_dir: Path, ff, model) -> None:
    """``feedforward.csv`` (time + one column per muscle element: the loopback playback's direct
    schedule), ``initial_state.json`` (the first posture's rest state, for ``[plant] initial``) and the
    trajectory files of :func:`write_trajectory` for the distinct postures."""
    with output_file(out_dir / "feedforward.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["time", *model.muscle_names])
        w.writerows([f"{t:.6f}", *(f"{v:.6f}" for v in row)] for t, row in zip(ff.times, ff.excitation))
    write_output_text(out_dir / "initial_state.json", json.dumps({"x": ff.initial_state.tolist()}) + "\n")
    distinct = list({id(s): s for s in ff.solutions}.values())
    write_trajectory(out_dir, distinct, model)
