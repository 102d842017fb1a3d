"""``hil sweep --report``: the plots of a sweep's results (``DIR/results.jsonl``, :mod:`hil.sweep.runner`), finished or
not, written to ``DIR/report/``.

- ``metrics_vs_<key>.png``, one per swept key: a panel per metric that has numbers (tracking RMS error,
  settling time, overshoot, final error, GH-unstable ticks, smallest GH margin, watchdog ticks, the charge
  summed over the channels) against the key, a point per ok run, coloured by another grid or choice key; for
  a grid or choice key also the mean at each value. Text and boolean values are categories. A run that never
  settled is a hollow triangle at the run length, not a settling time.
- ``heatmap_<key>__<key>.png``, one per pair of grid keys: the headline metrics (RMS error, settling time,
  overshoot, GH margin) over that 2-D grid, each cell the mean over its ok runs (the random samples and the
  other grid keys) and annotated; a cell without an ok run is hatched and says why (error, not run).
- ``failures.png``: the runs ranked by how they fail the sweep's ``[failure]`` criteria (:mod:`hil.sweep.failures`),
  worst first, with their RMS tracking error and the reasons.
- ``summary.json``: the figures, the failure ranking (``failures``), the ok / error / not-run counts, n, min,
  median and max of every metric over the ok runs, and each heat map's grids of values and counts.

Rows with status "error" are counted and never plotted.
"""
from __future__ import annotations

import json
import math
import os
import re
from collections import Counter
from dataclasses import dataclass
from itertools import combinations

import numpy as np

from hil.reports.run_report import pyplot_agg, save_png
from hil.sweep.failures import finite_number, plot_failures, rank_failures
from hil.sweep.population import sample_patients
from hil.sweep.runner import json_lines
from hil.sweep.spec import SweepSpec, variants
from sim.errors import UserInputError
from sim.output_file import output_file

METRICS = {
    "rms_error_deg": "RMS tracking error (deg)",
    "settling_time_s": "settling time (s)",
    "overshoot_deg": "overshoot (deg)",
    "final_error_deg": "final error (deg)",
    "gh_unstable_ticks": "GH-unstable ticks",
    "gh_min_margin": "smallest GH margin (> 0: inside the rim)",
    "watchdog_ticks": "watchdog ticks",
    "total_charge_uc": "charge, all channels (uC)",
}
HEADLINE = ("rms_error_deg", "settling_time_s", "overshoot_deg", "gh_min_margin")
SETTLING = "settling_time_s"
UNITS = (("_ma_per_rad_s", "mA/(rad s)"), ("_ma_s_per_rad", "mA s/rad"), ("_ma_per_rad", "mA/rad"),
         ("_deg_s", "deg/s"), ("_deg", "deg"), ("_ms", "ms"), ("_us", "us"), ("_hz", "Hz"), ("_ma", "mA"),
         ("_n", "N"), ("_s", "s"))
MAX_COLOURS = 8        # a colour key with more values than this colours nothing
MAX_ANNOTATED = 25     # heat maps with more rows or columns than this are not annotated


class SweepReportError(UserInputError):
    """A sweep directory with nothing to report."""


def _canon(value) -> str:
    """A parameter value's identity (1, 1.0 and true differ)."""
    return json.dumps(value, sort_keys=True, default=float)


def _unique(values) -> list:
    seen = {}
    for v in values:
        seen.setdefault(_canon(v), v)
    return list(seen.values())


def _never_settled(row: dict) -> bool:
    """A tracked run (it has an RMS error) without a settling time."""
    return row.get(SETTLING) is None and finite_number(row.get("rms_error_deg")) is not None


def _with_total_charge(row: dict) -> dict:
    charges = [finite_number(v) for k, v in row.items() if k.startswith("charge_") and k.endswith("_uc")]
    charges = [q for q in charges if q is not None]
    return {**row, "total_charge_uc": float(sum(charges)) if charges else None}


def read_rows(spec: SweepSpec, out_dir: str) -> tuple[list[dict], int]:
    """The rows of ``spec``'s runs in ``out_dir/results.jsonl`` (the first per id; rows of other sweeps skipped),
    each with ``total_charge_uc``, and the number of runs of the sweep."""
    path = os.path.join(out_dir, "results.jsonl")
    if not os.path.isfile(path):
        raise SweepReportError(f"{path} not found: no results to report (run the sweep into {out_dir} first)")
    ids = {v.id for v in variants(spec)}
    rows = {}
    for row in json_lines(path):
        if row.get("id") in ids:
            rows.setdefault(row["id"], _with_total_charge(row))
    return list(rows.values()), len(ids)


def _key_label(key: str) -> str:
    """The swept key with its unit (from its name's suffix)."""
    unit = next((u for suffix, u in UNITS if key.endswith(suffix)), None)
    return f"{key} ({unit})" if unit else key


def _tick_label(value) -> str:
    if isinstance(value, str):
        return value
    return f"{value:g}" if finite_number(value) is not None else json.dumps(value, default=str)


def _file_part(key: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", key)


@dataclass(frozen=True)
class Axis:
    """A swept key on an x axis: its discrete values in the sweep file's order (None: uniform samples), and
    whether they are categories (any value not a number) placed at 0, 1, ..."""

    key: str
    levels: list | None
    categorical: bool

    @classmethod
    def of(cls, spec: SweepSpec, key: str) -> Axis:
        if key in spec.grid:
            levels = _unique(spec.grid[key])
        elif key == "patient_preset":
            levels = list(spec.population.presets)
        elif key == "patient":
            levels = [p.label for p in sample_patients(spec.population)]
        elif key == "patient_strength_factor":
            levels = None
        else:
            dist = spec.random[key]
            levels = _unique(dist[1]) if dist[0] == "choice" else None
        return cls(key, levels, levels is not None and any(finite_number(v) is None for v in levels))

    def x(self, value) -> float:
        if not self.categorical:
            return float(value)
        return float([_canon(v) for v in self.levels].index(_canon(value)))

    def dodge(self, group: int, groups: int) -> float:
        """x offset of colour group ``group`` of ``groups`` so that the groups of one value sit side by side."""
        if self.levels is None or groups < 2:
            return 0.0
        xs = np.unique([self.x(v) for v in self.levels])
        step = float(np.min(np.diff(xs))) if len(xs) > 1 else 1.0
        return (group - (groups - 1) / 2) * 0.15 * step / groups

    def decorate(self, ax) -> None:
        ax.set_xlabel(_key_label(self.key))
        if self.categorical:
            ax.set_xticks(range(len(self.levels)), [_tick_label(v) for v in self.levels])
            ax.set_xlim(-0.5, len(self.levels) - 0.5)


def _colour_groups(spec: SweepSpec, key: str, rows: list[dict]) -> tuple[str | None, list]:
    """The first other grid or choice key with 2..MAX_COLOURS values and the rows at each of its values
    (label, rows); (None, [(None, rows)]) without one."""
    for other in spec.keys:
        axis = Axis.of(spec, other)
        if other != key and axis.levels is not None and 2 <= len(axis.levels) <= MAX_COLOURS:
            return other, [(_tick_label(v), [r for r in rows if _canon(r.get(other)) == _canon(v)])
                           for v in axis.levels]
    return None, [(None, rows)]


def _points(axis: Axis, rows: list[dict], metric: str, dx: float = 0.0) -> tuple[list, list]:
    pts = [(axis.x(r[axis.key]) + dx, finite_number(r.get(metric))) for r in rows]
    return [x for x, y in pts if y is not None], [y for x, y in pts if y is not None]


def _plot_means(ax, axis: Axis, rows: list[dict], metric: str) -> None:
    """The mean over the runs at each value of a discrete key (black)."""
    means = []
    for level in axis.levels:
        ys = _points(axis, [r for r in rows if _canon(r.get(axis.key)) == _canon(level)], metric)[1]
        if ys:
            means.append((axis.x(level), float(np.mean(ys))))
    if means:
        xs, ys = zip(*sorted(means))
        ax.plot(xs, ys, "kD" if axis.categorical else "kD-", ms=4, lw=1, label="mean", zorder=3)


def _plot_never_settled(ax, axis: Axis, groups: list, duration_s: float) -> None:
    """Runs that never settled: hollow triangles at the run length, and how many."""
    n = 0
    for g, (_, rows) in enumerate(groups):
        xs = [axis.x(r[axis.key]) + axis.dodge(g, len(groups)) for r in rows if _never_settled(r)]
        ax.plot(xs, [duration_s] * len(xs), "^", mfc="none", color=f"C{g}", ms=7)
        n += len(xs)
    if n:
        ax.axhline(duration_s, color="0.6", ls=":", lw=1)
        ax.set_ylim(0.0, duration_s * 1.15)
        ax.text(0.01, 0.97, f"\u25b3 never settled: {n} run(s), drawn at the run length ({duration_s:g} s)",
                transform=ax.transAxes, va="top", fontsize=7)


def _panel_vs_key(ax, axis: Axis, groups: list, metric: str, duration_s: float) -> None:
    for g, (label, rows) in enumerate(groups):
        xs, ys = _points(axis, rows, metric, axis.dodge(g, len(groups)))
        ax.plot(xs, ys, "o", color=f"C{g}", alpha=0.7, ms=5, label=label)
    all_rows = [r for _, rows in groups for r in rows]
    if axis.levels is not None:
        _plot_means(ax, axis, all_rows, metric)
    if metric == SETTLING:
        _plot_never_settled(ax, axis, groups, duration_s)
    axis.decorate(ax)
    ax.set_ylabel(METRICS[metric])
    ax.grid(alpha=0.3)


def plot_metrics_vs_key(plt, spec: SweepSpec, key: str, ok_rows: list[dict], metrics: list[str], report_dir: str,
                        n_error: int = 0) -> str:
    """``metrics_vs_<key>.png``: one panel per metric against ``key`` (``n_error`` error rows left out, as the
    title says); returns its path."""
    axis = Axis.of(spec, key)
    colour_key, groups = _colour_groups(spec, key, ok_rows)
    ncols = 2 if len(metrics) > 1 else 1
    nrows = math.ceil(len(metrics) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(6 * ncols, 2.8 * nrows + 0.6), squeeze=False)
    for ax, metric in zip(axes.flat, metrics):
        _panel_vs_key(ax, axis, groups, metric, spec.duration_s)
    for ax in axes.flat[len(metrics):]:
        ax.set_visible(False)
    if axes.flat[0].get_legend_handles_labels()[0]:
        axes.flat[0].legend(title=colour_key, fontsize=7, title_fontsize=7, loc="best")
    fig.suptitle(f"Run metrics vs {key} ({len(ok_rows)} ok runs; {n_error} error rows left out)")
    return save_png(plt, fig, os.path.join(report_dir, f"metrics_vs_{_file_part(key)}.png"))


def _mean(rows: list[dict], metric: str) -> float | None:
    values = [v for v in (finite_number(r.get(metric)) for r in rows) if v is not None]
    return float(np.mean(values)) if values else None


def heat_map(spec: SweepSpec, rows: list[dict], y_key: str, x_key: str, metrics: list[str]) -> dict:
    """Grid keys ``y_key`` (rows, first index) by ``x_key`` (columns): per cell the ok and error runs, the
    runs that never settled, and the mean of each metric over the cell's ok runs (None: no number)."""
    ys, xs = _unique(spec.grid[y_key]), _unique(spec.grid[x_key])
    iy, ix = {_canon(v): i for i, v in enumerate(ys)}, {_canon(v): j for j, v in enumerate(xs)}
    cells = [[[] for _ in xs] for _ in ys]
    for r in rows:
        i, j = iy.get(_canon(r.get(y_key))), ix.get(_canon(r.get(x_key)))
        if i is not None and j is not None:
            cells[i][j].append(r)
    ok = [[[r for r in cell if r.get("status") == "ok"] for cell in line] for line in cells]
    return {"y_key": y_key, "x_key": x_key, "y_values": ys, "x_values": xs,
            "n_ok": [[len(c) for c in line] for line in ok],
            "n_error": [[len(c) - len(o) for c, o in zip(line, oline)] for line, oline in zip(cells, ok)],
            "never_settled": [[sum(map(_never_settled, c)) for c in line] for line in ok],
            "mean": {m: [[_mean(c, m) for c in line] for line in ok] for m in metrics}}


def _cell_text(hm: dict, metric: str, i: int, j: int) -> tuple[str, bool]:
    """A cell's annotation and whether it is hatched (no ok run)."""
    n_ok, never, value = hm["n_ok"][i][j], hm["never_settled"][i][j], hm["mean"][metric][i][j]
    if n_ok == 0:
        return ("error" if hm["n_error"][i][j] else "not run"), True
    if value is None:
        return ("never\nsettled" if metric == SETTLING and never else "n/a"), False
    extra = f"\n+{never} never" if metric == SETTLING and never else ""
    return f"{value:.3g}{extra}", False


def _annotate_cells(ax, im, grid: np.ndarray, hm: dict, metric: str) -> None:
    """Each cell's value (or why it has none); cells without an ok run hatched."""
    from matplotlib.patches import Rectangle

    annotate = max(grid.shape) <= MAX_ANNOTATED
    size = max(6.0, min(10.0, 48.0 / max(grid.shape)))
    for (i, j), value in np.ndenumerate(grid):
        text, hatched = _cell_text(hm, metric, i, j)
        if hatched:
            ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="//", edgecolor="0.6", lw=0))
        if annotate:
            dark = np.isfinite(value) and im.norm(value) < 0.5
            ax.text(j, i, text, ha="center", va="center", fontsize=size, color="white" if dark else "black")


def _heat_panel(fig, ax, hm: dict, metric: str) -> None:
    """One metric's heat map: y key up, x key across, cells in the order of the sweep file."""
    import matplotlib

    grid = np.array([[np.nan if v is None else v for v in line] for line in hm["mean"][metric]], dtype=float)
    finite = grid[np.isfinite(grid)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="white")
    im = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=lo, vmax=hi, origin="lower", aspect="auto")
    if finite.size:
        fig.colorbar(im, ax=ax, label=METRICS[metric])
    _annotate_cells(ax, im, grid, hm, metric)
    ax.set_xticks(range(grid.shape[1]), [_tick_label(v) for v in hm["x_values"]])
    ax.set_yticks(range(grid.shape[0]), [_tick_label(v) for v in hm["y_values"]])
    ax.set_xlabel(_key_label(hm["x_key"]))
    ax.set_ylabel(_key_label(hm["y_key"]))
    ax.set_title(METRICS[metric], fontsize=10)


def _missing_note(hm: dict) -> str:
    n_ok, n_err = np.array(hm["n_ok"]), np.array(hm["n_error"])
    errors, not_run = int(np.sum((n_ok == 0) & (n_err > 0))), int(np.sum((n_ok == 0) & (n_err == 0)))
    if not errors and not not_run:
        return "every cell has ok runs"
    return f"hatched, no ok run: {errors} cell(s) with only error runs, {not_run} cell(s) not run yet"


def plot_heat_map(plt, hm: dict, report_dir: str) -> str:
    """``heatmap_<y key>__<x key>.png``: one panel per metric of the heat map ``hm``; returns its path."""
    metrics = list(hm["mean"])
    ncols = 2 if len(metrics) > 1 else 1
    nrows = math.ceil(len(metrics) / ncols)
    w = min(9.0, 3.0 + 0.9 * len(hm["x_values"]))
    h = min(7.0, 1.8 + 0.6 * len(hm["y_values"]))
    fig, axes = plt.subplots(nrows, ncols, figsize=(w * ncols, h * nrows + 0.8), squeeze=False)
    for ax, metric in zip(axes.flat, metrics):
        _heat_panel(fig, ax, hm, metric)
    for ax in axes.flat[len(metrics):]:
        ax.set_visible(False)
    fig.suptitle(f"{hm['y_key']} by {hm['x_key']}: mean over the ok runs at each point\n{_missing_note(hm)}",
                 fontsize=10)
    name = f"heatmap_{_file_part(hm['y_key'])}__{_file_part(hm['x_key'])}.png"
    return save_png(plt, fig, os.path.join(report_dir, name))


def metric_stats(ok_rows: list[dict], metric: str) -> dict:
    """n, min, median and max of ``metric`` over the ok runs, the runs without a number (``null``) and, for the
    settling time, those that never settled."""
    values = [v for v in (finite_number(r.get(metric)) for r in ok_rows) if v is not None]
    doc = {"n": len(values), "null": len(ok_rows) - len(values),
           "min": float(np.min(values)) if values else None,
           "median": float(np.median(values)) if values else None,
           "max": float(np.max(values)) if values else None}
    if metric == SETTLING:
        doc["never_settled"] = sum(map(_never_settled, ok_rows))
    return doc


def _plotted_metrics(ok_rows: list[dict]) -> list[str]:
    """The metrics with a number in some ok run (the settling time also when a run never settled)."""
    return [m for m in METRICS
            if any(finite_number(r.get(m)) is not None or (m == SETTLING and _never_settled(r)) for r in ok_rows)]


def _figures(plt, spec: SweepSpec, rows: list[dict], ok: list[dict], report_dir: str) -> tuple[list, list]:
    """Every plot: (figures, heat maps with their files)."""
    metrics = _plotted_metrics(ok)
    if not metrics:
        return [], []
    n_error = len(rows) - len(ok)
    figures = [{"file": plot_metrics_vs_key(plt, spec, key, ok, metrics, report_dir, n_error),
                "kind": "metrics_vs_key", "keys": [key]} for key in spec.keys if key != "patient"]
    headline = [m for m in HEADLINE if m in metrics]
    maps = [heat_map(spec, rows, a, b, headline) for a, b in combinations(spec.grid, 2)] if headline else []
    for hm in maps:
        hm["file"] = plot_heat_map(plt, hm, report_dir)
        figures.append({"file": hm["file"], "kind": "heat_map", "keys": [hm["y_key"], hm["x_key"]]})
    return figures, maps


def sweep_report(spec: SweepSpec, out_dir: str) -> dict:
    """Write the plots and ``summary.json`` of the sweep ``spec`` run into ``out_dir`` to ``out_dir/report/``;
    returns the summary."""
    rows, n_runs = read_rows(spec, out_dir)
    ok = [r for r in rows if r.get("status") == "ok"]
    if not ok:
        raise SweepReportError(f"{out_dir}: no run of the sweep finished ok ({len(rows)} error row(s), "
                               f"{n_runs - len(rows)} of {n_runs} runs not run yet); nothing to plot")
    report_dir = os.path.join(out_dir, "report")
    os.makedirs(report_dir, exist_ok=True)
    plt = pyplot_agg()
    figures, maps = _figures(plt, spec, rows, ok, report_dir)
    failures = rank_failures(rows, spec.failure, spec.keys)
    failures["file"] = plot_failures(plt, failures, os.path.join(report_dir, "failures.png"), save_png,
                                     os.path.basename(spec.path))
    figures.append({"file": failures["file"], "kind": "failures", "keys": []})
    charge = sorted({k for r in ok for k in r if k.startswith("charge_") and k.endswith("_uc")})
    errors = Counter(str(r.get("error", "")) for r in rows if r.get("status") != "ok")
    doc = {"sweep": spec.path, "results": os.path.join(out_dir, "results.jsonl"), "report_dir": report_dir,
           "runs": n_runs, "rows": {"ok": len(ok), "error": len(rows) - len(ok), "not_run": n_runs - len(rows)},
           "error_reasons": dict(errors.most_common(10)),
           "metrics": {m: metric_stats(ok, m) for m in [*METRICS, *charge]},
           "failures": failures, "figures": figures, "heat_maps": maps,
           "summary": os.path.join(report_dir, "summary.json")}
    with output_file(doc["summary"], "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2, default=str)
    return doc
