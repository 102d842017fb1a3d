"""Where a controller fails: each run of a sweep judged against the sweep file's ``[failure]`` criteria and the
runs ranked, the worst first (``hil sweep --report``: ``summary.json`` "failures", ``failures.png``).

A run fails when any criterion holds: a safety action stopped it; its plant diverged or its task died (an
error row that is not the input's fault); the GH joint left the stable region for more ticks than allowed; its
smallest GH margin is below the floor; its tracking never settled; or its RMS or final tracking error exceeds
the limit. Ranking: more failed criteria first, then the larger RMS tracking error.
"""
from __future__ import annotations

import math

from drivers.core.config_table import ConfigTable
from hil.safety.table import StopReason
from sim.config_schema import Key, Section

FAILURE_SCHEMA = Section("failure", "When a sweep's run counts as a failure of the controller (a sweep file's "
                         "[failure] table).", (
    Key("safety_stop", "boolean", True, "a run a safety action stopped fails"),
    Key("diverged", "boolean", True, "a run whose plant diverged (or whose task died) fails"),
    Key("max_gh_unstable_ticks", "integer", 0, "a run with more GH-unstable ticks fails", lo=0, hi=2**62),
    Key("min_gh_margin", "number", -1.0, "a run whose smallest GH margin (eq. 9: > 0 inside the glenoid rim) is "
        "below this fails", lo=-1e3, hi=1.0),
    Key("must_settle", "boolean", True, "a tracked run that never settles within the settling band fails"),
    Key("max_rms_error_deg", "number", 360.0, "a run with a larger RMS tracking error fails (360: no limit)",
        lo=0.0, hi=360.0),
    Key("max_final_error_deg", "number", 360.0, "a run whose final tracking error is larger (absolute) fails "
        "(360: no limit)", lo=0.0, hi=360.0),
))
FAIL, PASS = "#c0392b", "#95a5a6"
MAX_RANKED = 200
"""Runs listed in the summary's ranking (all are counted)."""


def read_failure(doc: dict, path: str) -> dict:
    """The ``[failure]`` criteria of a sweep file (its defaults without one)."""
    reader = ConfigTable.section(doc, "failure", path)
    values = reader.read(FAILURE_SCHEMA)
    reader.done()
    return values


def finite_number(value) -> float | None:
    """``value`` as a finite float; None for null, text, booleans and NaN."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def failed_criteria(row: dict, criteria: dict) -> list[str]:
    """The criteria ``row`` (a results row) fails, as short reasons; [] for a pass. Input errors are not judged."""
    if row.get("status") != "ok":
        return ["run error (diverged)"] if criteria["diverged"] and not row.get("input_error") else []
    reasons = []
    if criteria["safety_stop"] and row.get("stopped_by") not in (None, "", StopReason.DURATION):
        reasons.append(f"safety stop ({row['stopped_by']})")
    unstable = finite_number(row.get("gh_unstable_ticks")) or 0
    if unstable > criteria["max_gh_unstable_ticks"]:
        reasons.append(f"GH unstable {int(unstable)} ticks")
    margin = finite_number(row.get("gh_min_margin"))
    if margin is not None and margin < criteria["min_gh_margin"]:
        reasons.append(f"GH margin {margin:.3g}")
    rms = finite_number(row.get("rms_error_deg"))
    if criteria["must_settle"] and rms is not None and row.get("settling_time_s") is None:
        reasons.append("never settled")
    if rms is not None and rms > criteria["max_rms_error_deg"]:
        reasons.append(f"RMS error {rms:.1f} deg")
    final = finite_number(row.get("final_error_deg"))
    if final is not None and abs(final) > criteria["max_final_error_deg"]:
        reasons.append(f"final error {final:.1f} deg")
    return reasons


def _rank_key(entry: dict) -> tuple:
    rms = finite_number(entry["row"].get("rms_error_deg"))
    return (-len(entry["failed"]), -(rms if rms is not None else math.inf))


def rank_failures(rows: list[dict], criteria: dict, keys: list[str]) -> dict:
    """Every judged run (ok rows, and error rows not caused by the input), the failing ones ranked first; per
    patient preset, how many of its runs failed."""
    judged = [{"row": r, "failed": failed_criteria(r, criteria)} for r in rows
              if r.get("status") == "ok" or not r.get("input_error")]
    judged.sort(key=_rank_key)
    failing = [e for e in judged if e["failed"]]
    by_preset: dict[str, dict] = {}
    for e in judged:
        counts = by_preset.setdefault(str(e["row"].get("patient_preset", "")), {"runs": 0, "failed": 0})
        counts["runs"] += 1
        counts["failed"] += bool(e["failed"])
    ranking = [{"id": e["row"].get("id"), "failed": e["failed"], **{k: e["row"].get(k) for k in keys},
                "patient_strength_factor": e["row"].get("patient_strength_factor"),
                **{m: e["row"].get(m) for m in ("rms_error_deg", "final_error_deg", "settling_time_s",
                                                 "gh_min_margin", "stopped_by", "error")}}
               for e in judged[:MAX_RANKED]]
    return {"criteria": criteria, "judged": len(judged), "failed": len(failing),
            "by_preset": by_preset, "ranking": ranking}


def plot_failures(plt, failures: dict, path: str, save_png, title: str, shown: int = 40) -> str:
    """Left: a bar per run (the ``shown`` highest ranked), its RMS tracking error, red when it fails (the reasons
    beside it), grey when it passes. Right, for a population: each run's smallest GH margin against its patient's
    subject-wide strength factor, a marker per preset, failed runs red."""
    ranking = failures["ranking"][:shown]
    population = any(e.get("patient_strength_factor") is not None for e in failures["ranking"])
    fig, axes = plt.subplots(1, 2 if population else 1, figsize=(14.0 if population else 9.0,
                                                                  1.2 + 0.28 * max(len(ranking), 8)),
                             layout="constrained", squeeze=False, width_ratios=[3, 2] if population else None)
    _ranking_panel(axes[0, 0], ranking, failures["criteria"]["max_rms_error_deg"])
    if population:
        _margin_panel(axes[0, 1], failures["ranking"])
    fig.suptitle(f"{title}: {failures['failed']} of {failures['judged']} runs fail (red; worst at the top)",
                 fontsize=10)
    return save_png(plt, fig, path)


def _ranking_panel(ax, ranking: list[dict], limit: float) -> None:
    labels = [str(e.get("patient") or e["id"]) for e in ranking]
    rms = [finite_number(e.get("rms_error_deg")) or 0.0 for e in ranking]
    y = list(range(len(ranking)))[::-1]
    ax.barh(y, rms, color=[FAIL if e["failed"] else PASS for e in ranking])
    for yi, value, e in zip(y, rms, ranking):
        if e["failed"]:
            ax.text(value, yi, "  " + "; ".join(e["failed"]), va="center", fontsize=7)
    if limit < 360.0:
        ax.axvline(limit, color="k", ls="--", lw=0.8, label=f"RMS limit {limit:g} deg")
        ax.legend(loc="lower right", fontsize=8)
    ax.set_yticks(y, labels, fontsize=7)
    ax.set_xlabel("RMS tracking error (deg)")


def _margin_panel(ax, ranking: list[dict]) -> None:
    presets = sorted({str(e.get("patient_preset")) for e in ranking})
    for k, preset in enumerate(presets):
        rows = [e for e in ranking if str(e.get("patient_preset")) == preset
                and finite_number(e.get("gh_min_margin")) is not None]
        ax.scatter([e["patient_strength_factor"] for e in rows], [e["gh_min_margin"] for e in rows],
                   marker="osD^v<>p"[k % 8], c=[FAIL if e["failed"] else PASS for e in rows], label=preset,
                   edgecolors="k", linewidths=0.4)
    ax.axhline(0.0, color="k", lw=0.8, ls=":")
    ax.set_xlabel("patient's subject-wide strength factor (x preset strengths)")
    ax.set_ylabel("smallest GH margin (> 0: inside the glenoid rim)")
    ax.legend(fontsize=8, title="preset (marker)", title_fontsize=8)
    ax.grid(alpha=0.3)
