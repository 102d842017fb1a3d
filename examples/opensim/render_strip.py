"""A run animated in the DAS3 OpenSim model: frames of an exported .mot drawn from the model's body positions.

    hil export runs/run.hilrec --mot run.mot
    python examples/opensim/render_strip.py das3.osim run.mot strip.png --frames 6

Each .mot row sets the model's coordinates (OpenSim 4.6, ``Model.getCoordinateSet``); OpenSim places the bodies and
the figure joins the origins of clavicle_r (SC joint), scapula_r (AC), humerus_r (GH), ulna_r (elbow), radius_r and
hand_r (wrist), relative to the thorax, seen from the side (thorax Z, Y; Z points posterior) and from the front
(X, Y). ``das3.osim`` is the DAS3 release's model file (Chadwick et al. 2014), not shipped with this project.
"""
from __future__ import annotations

import argparse
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

BODIES = ("thorax", "clavicle_r", "scapula_r", "humerus_r", "ulna_r", "radius_r", "hand_r")


def body_points(model_path: str, mot_path: str, frames: int, end_s: float | None = None) -> tuple[np.ndarray,
                                                                                                 np.ndarray]:
    """(times (frames,), points (frames, 7, 3) m in the thorax frame) at evenly spaced rows of the .mot (up to
    ``end_s`` s when given)."""
    import opensim as osim

    osim.Logger.removeFileSink()
    osim.Logger.setLevelString("error")
    model = osim.Model(model_path)
    state = model.initSystem()
    table = osim.TimeSeriesTable(mot_path)
    if table.getTableMetaDataAsString("inDegrees") != "no":
        sys.exit(f"{mot_path}: export the motion in radians (hil export --mot without --degrees)")
    labels = [table.getColumnLabel(j) for j in range(table.getNumColumns())]
    time = np.array(table.getIndependentColumn())
    last = table.getNumRows() - 1 if end_s is None else int(np.searchsorted(time, end_s, "right")) - 1
    rows = np.linspace(0, max(last, 1), frames).round().astype(int)
    times, points = [], []
    for k in rows:
        row = table.getRowAtIndex(int(k))
        for j, name in enumerate(labels):
            model.getCoordinateSet().get(name).setValue(state, float(row[j]), False)
        model.realizePosition(state)
        p = np.array([[b.getPositionInGround(state).get(i) for i in range(3)]
                      for b in (model.getBodySet().get(n) for n in BODIES)])
        rot = model.getBodySet().get("thorax").getTransformInGround(state).R()
        r_thorax = np.array([[rot.get(i, j) for j in range(3)] for i in range(3)])
        points.append((p - p[0]) @ r_thorax)          # thorax frame: R^T (p - p_thorax), row-wise
        times.append(time[k])
    return np.array(times), np.array(points)


def draw(times: np.ndarray, points: np.ndarray, out: str) -> None:
    n = len(times)
    fig, axes = plt.subplots(2, n, figsize=(1.9 * n, 4.2), sharex="row", sharey=True)
    for c in range(n):
        for r, (h, label) in enumerate(((2, "Z (m, posterior)"), (0, "X (m, lateral)"))):
            ax = axes[r, c]
            ax.plot(points[c, 1:, h], points[c, 1:, 1], "-o", color="tab:blue", ms=3, lw=2)
            ax.plot(points[c, 0, h], points[c, 0, 1], "s", color="0.4", ms=4)
            ax.set_aspect("equal")
            ax.grid(alpha=0.3)
            if r == 0:
                ax.set_title(f"t = {times[c]:.2f} s", fontsize=9)
            if c == 0:
                ax.set_ylabel("Y (m, up)")
            ax.set_xlabel(label, fontsize=8)
    fig.suptitle("DAS3 OpenSim model posed by a hil run's .mot (side and front; square: thorax origin)", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="das3.osim")
    parser.add_argument("mot", help=".mot written by hil export --mot (radians)")
    parser.add_argument("out", help="output PNG")
    parser.add_argument("--frames", type=int, default=6)
    parser.add_argument("--end", type=float, default=None, help="last time drawn, s (default: the whole run)")
    args = parser.parse_args()
    times, points = body_points(args.model, args.mot, max(2, args.frames), args.end)
    draw(times, points, args.out)
    print(f"{args.out}: {len(times)} frames")


if __name__ == "__main__":
    main()
