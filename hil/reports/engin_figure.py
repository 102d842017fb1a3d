"""``hil model engin-sinus``: Engin's shoulder sinus and passive moment field as CSV and figure, evaluated
with the plant's own kernels (``sim.das3.engin``). Offline (allocates).

Panels: (a) globographic representation (Engin and Chen, thesis Sec. 3.3, Fig. D.2): the unit sphere
about the shoulder seen from outside along the pole of the mean joint axes, with the torso-fixed meridians
and parallels, the sinus and the moment's contours and directions; (b) the same in Engin's modified joint
axis system p = theta cos phi, q = theta sin phi (radians, Figs. 3.11 and E.4); (c) the torsion table.
"""
from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

from hil.reports.run_report import pyplot_agg
from sim.das3 import engin as en
from sim.das3.model import Das3Model
from sim.das3.plant import Plant
from sim.output_file import output_file

LEVELS_NM = (6.0, 10.0, 14.0, 18.0, 22.0, 26.0)   # contour levels of Engin's Fig. E.4 range (6 to 26 Nm)
CSV_LEVELS_NM = (6.0, 26.0)
PQ_LIMIT_RAD = 2.5                               # extent of Figs. 3.11 and E.4


def joint_axes(E) -> np.ndarray:
    """Rows x_jt, y_jt, z_jt (thorax frame) of the kernels' parameter vector."""
    return np.asarray(E[en.AXES:en.AXES + 9]).reshape(3, 3)


def direction(E, phi: float, theta: float) -> np.ndarray:
    """Unit humerus direction (thorax frame) at the spherical angles of the mean joint axes (App. C)."""
    return np.array([math.sin(theta) * math.cos(phi), math.sin(theta) * math.sin(phi), math.cos(theta)]) @ joint_axes(E)


def bending_magnitude(E, phi: float, theta: float) -> float:
    """|bending moment| (Nm) of the kernel at (phi, theta)."""
    J = np.zeros((3, 7))
    en.bending_moment(E, direction(E, phi, theta), J)
    return float(np.linalg.norm(J[:, 0]))


def contour_theta(E, phi: float, level: float) -> float:
    """theta (rad) where the bending moment reaches ``level`` along the meridian phi (it rises
    monotonically beyond the sinus), by bisection; NaN if it stays below up to theta = pi - 0.01."""
    lo = en.sinus_boundary(E, math.cos(phi), math.sin(phi))[0]
    hi = math.pi - 0.01
    if bending_magnitude(E, phi, hi) < level:
        return math.nan
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if bending_magnitude(E, phi, mid) < level else (lo, mid)
    return 0.5 * (lo + hi)


def sinus_table(E, n: int = 73) -> dict:
    """phi (rad) on [0, 2 pi], the sinus theta_s and the theta of each level of LEVELS_NM."""
    phi = np.linspace(0.0, 2.0 * math.pi, n)
    out = {"phi": phi, "sinus": np.array([en.sinus_boundary(E, math.cos(p), math.sin(p))[0] for p in phi])}
    for level in LEVELS_NM:
        out[level] = np.array([contour_theta(E, p, level) for p in phi])
    return out


def rest_posture(model: Das3Model) -> tuple[float, float, float]:
    """(phi, theta, psi) of the humerus at the model's initial state (the published equilibrium)."""
    E = model.arrays.engin
    u, a = Plant(model).workspace.mb.engin_dir
    phi, theta = en.spherical_angles(E, u)
    return phi, theta, en.torsion_angle(E, u, a)


def write_engin_sinus(out_dir: Path, model: Das3Model) -> Path:
    """``engin_sinus.csv`` (per phi: the sinus and the 6 and 26 Nm contours, degrees) and ``.png``."""
    E = model.arrays.engin
    table = sinus_table(E)
    with output_file(out_dir / "engin_sinus.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["phi_deg", "sinus_theta_deg", *[f"theta_{level:g}Nm_deg" for level in CSV_LEVELS_NM]])
        for k, p in enumerate(table["phi"]):
            w.writerow([f"{math.degrees(p):.9g}", f"{math.degrees(table['sinus'][k]):.9g}",
                        *[f"{math.degrees(table[level][k]):.9g}" for level in CSV_LEVELS_NM]])
    path = out_dir / "engin_sinus.png"
    _plot(path, E, sinus_table(E, 361), rest_posture(model))
    return path


def _view(E) -> np.ndarray:
    """Rows: screen right, screen up (thorax superior, made perpendicular to the pole), pole."""
    z = joint_axes(E)[2]
    up = np.array([0.0, 1.0, 0.0]) - z[1] * z
    up /= np.linalg.norm(up)
    return np.array([np.cross(up, z), up, z])


def _globe_line(ax, V, points, **style) -> None:
    """Draw points (N, 3) on the globe: solid where visible, dotted behind it."""
    xy, front = points @ V[:2].T, points @ V[2] >= 0.0
    for visible, ls in ((True, style.pop("ls", "-")), (False, ":")):
        seg = np.where(front == visible, 1.0, np.nan)
        ax.plot(xy[:, 0] * seg, xy[:, 1] * seg, ls=ls, **style)


def _torso(phi_f, theta_f) -> np.ndarray:
    """Unit vectors (N, 3, thorax frame) at torso-fixed spherical angles (from z_fb, azimuth from x_fb)."""
    v = np.stack([np.sin(theta_f) * np.cos(phi_f), np.sin(theta_f) * np.sin(phi_f), np.cos(theta_f)], axis=-1)
    return v @ np.array(en.TORSO_AXES_DAS3)


def _plot_globe(ax, E, table, rest) -> None:
    V = _view(E)
    ax.add_patch(pyplot_agg().Circle((0, 0), 1.0, fill=False, color="0.3", lw=1))
    t = np.linspace(0.0, math.pi, 91)
    for m in range(0, 360, 30):
        _globe_line(ax, V, _torso(np.full_like(t, math.radians(m)), t), color="0.75", lw=0.6)
    p = np.linspace(0.0, 2.0 * math.pi, 181)
    for par in range(30, 180, 30):
        _globe_line(ax, V, _torso(p, np.full_like(p, math.radians(par))), color="0.75", lw=0.6)
    axes = np.array(en.TORSO_AXES_DAS3)
    for label, v in zip(("x_fb (anterior)", "y_fb (lateral)", "z_fb (inferior)", "-z_fb (superior)"),
                        [*axes, -axes[2]]):
        if v @ V[2] > 0:
            ax.plot(*(V[:2] @ v), "k+", ms=8)
            ax.annotate(label, V[:2] @ v, fontsize=7, xytext=(3, 3), textcoords="offset points")
    phi = table["phi"]
    pts = np.array([direction(E, a, b) for a, b in zip(phi, table["sinus"])])
    _globe_line(ax, V, pts, color="k", lw=2)
    for level in CSV_LEVELS_NM:
        ok = np.isfinite(table[level])
        pts = np.array([direction(E, a, b) for a, b in zip(phi[ok], table[level][ok])])
        k = LEVELS_NM.index(level) / (len(LEVELS_NM) - 1)
        _globe_line(ax, V, pts, color=pyplot_agg().cm.viridis(k), lw=1.2)
    for m in range(0, 360, 15):
        a = math.radians(m)
        th_s = en.sinus_boundary(E, math.cos(a), math.sin(a))[0]
        for extra in (0.12, 0.3):
            b = th_s + extra
            u, tip = direction(E, a, b), direction(E, a, b - 0.003 * bending_magnitude(E, a, b))
            if u @ V[2] > 0 and tip @ V[2] > 0:
                ax.annotate("", V[:2] @ tip, V[:2] @ u, arrowprops=dict(arrowstyle="->", color="C3", lw=0.8))
    ax.plot(*(V[:2] @ direction(E, rest[0], rest[1])), "o", color="C1", ms=6)
    ax.set_aspect("equal")
    ax.set_xlim(-1.1, 1.1)
    ax.set_ylim(-1.1, 1.1)
    ax.axis("off")
    ax.set_title("(a) globe seen along the pole (superior up), torso-fixed grid every 30°:\n"
                 "sinus (black), 6 and 26 Nm, arrows as in (b); dotted: far side", fontsize=8)


def _plot_pq(fig, ax, E, table, rest) -> None:
    g = np.linspace(-PQ_LIMIT_RAD, PQ_LIMIT_RAD, 161)
    P, Q = np.meshgrid(g, g)
    mag = np.vectorize(lambda p, q: bending_magnitude(E, math.atan2(q, p), math.hypot(p, q))
                       if math.hypot(p, q) < math.pi else np.nan)(P, Q)
    fill = ax.contourf(P, Q, np.where(mag > 0, mag, np.nan), levels=np.arange(0.0, 62.0, 4.0), cmap="Greys", alpha=0.5)
    fig.colorbar(fill, ax=ax, label="bending moment (Nm)", shrink=0.8)
    phi = table["phi"]
    ax.plot(table["sinus"] * np.cos(phi), table["sinus"] * np.sin(phi), "k-", lw=2, label="voluntary sinus (eq. 3.1)")
    for k, level in enumerate(LEVELS_NM):
        ax.plot(table[level] * np.cos(phi), table[level] * np.sin(phi), lw=1,
                color=pyplot_agg().cm.viridis(k / (len(LEVELS_NM) - 1)), label=f"{level:g} Nm")
    c = np.linspace(-2.25, 2.25, 16)
    P, Q = np.meshgrid(c, c)
    th = np.hypot(P, Q)
    mag = np.vectorize(lambda p, q: bending_magnitude(E, math.atan2(q, p), math.hypot(p, q)))(P, Q)
    keep = mag > 0
    ax.quiver(P[keep], Q[keep], -P[keep] / th[keep] * mag[keep], -Q[keep] / th[keep] * mag[keep], color="C3",
              scale=600, width=0.003)
    ax.plot(rest[1] * math.cos(rest[0]), rest[1] * math.sin(rest[0]), "o", color="C1", ms=6,
            label="DAS3 published rest")
    for text, ang in (("up", 0.0), ("back", 0.5 * math.pi), ("down", math.pi), ("front", 1.5 * math.pi)):
        ax.annotate(f"phi = {math.degrees(ang):.0f}° ({text})", (2.35 * math.cos(ang), 2.35 * math.sin(ang)),
                    fontsize=7, ha="center", va="center", color="0.3")
    ax.set_aspect("equal")
    ax.set_xlim(-PQ_LIMIT_RAD, PQ_LIMIT_RAD)
    ax.set_ylim(-PQ_LIMIT_RAD, PQ_LIMIT_RAD)
    ax.set_xlabel("p = theta cos phi (rad)")
    ax.set_ylabel("q = theta sin phi (rad)")
    ax.legend(fontsize=6, loc="lower left")
    ax.set_title("(b) modified joint axes (Figs. 3.11, E.4): eq. 3.2 beyond the sinus;\n"
                 "arrows: the direction the moment turns the arm (back to the pole), length ∝ Nm", fontsize=8)


def _plot_torsion(ax, E, rest) -> None:
    psi = np.linspace(-2.3, 1.3, 721)
    ax.plot(np.degrees(psi), [en.torsion_table(E, p)[0] for p in psi], "C0-", lw=1, label="kernel (extended ends)")
    ax.plot(np.degrees(en.TORSION_ANGLE), en.TORSION_MOMENT, "k.", ms=4, label="APSI/MPSI table (App. G)")
    ax.axvline(math.degrees(rest[2]), color="C1", lw=1, label="DAS3 published rest")
    ax.set_ylim(-120, 120)
    ax.set_xlabel("psi (deg), internal rotation > 0; 0 = 45° internal, arm forwards")
    ax.set_ylabel("torsion moment on the humerus (Nm), internal > 0")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title("(c) torsion about the humeral axis (Fig. F.20)", fontsize=8)


def _plot(path: Path, E, table: dict, rest) -> None:
    plt = pyplot_agg()
    fig, (globe, pq, tors) = plt.subplots(1, 3, figsize=(17, 5.6), gridspec_kw={"width_ratios": [1, 1.2, 0.9]})
    _plot_globe(globe, E, table, rest)
    _plot_pq(fig, pq, E, table, rest)
    _plot_torsion(tors, E, rest)
    fig.suptitle("Engin's directional passive shoulder moments (shoulder_passive = \"das3+engin\"): "
                 "bending part (a, b; torsion excluded), torsion part (c)", fontsize=10)
    fig.tight_layout(rect=(0.0, 0.0, 1.0, 0.95))
    with output_file(path, "wb") as fh:
        fig.savefig(fh, dpi=100, format="png")
    plt.close(fig)
