"""``hil fit``: fit the reduced arm's muscle-torque generators to a recorded motion (Millard et al. 2019)."""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from hil.cli.common import (
    BadInputError,
    ExitCode,
    check_output_dir,
    load_model_options,
    out_console,
    positive,
    print_json,
    user_errors,
)
from sim.output_file import write_output_text

app = typer.Typer(no_args_is_help=True, help="Fit the reduced MTG arm to a recorded motion.")


@app.command("mtg")
def fit_mtg(
    motion: Annotated[Path, typer.Option(help="Motion CSV: time (s) and th_plane_of_elevation, th_elevation, "
                                              "th_axial_rotation, ELx, PSy (rad; `hil simulate` output), optionally "
                                              "tau_<coordinate> joint torques (N m), else external loads in "
                                              "columns named as the plant's loads (e.g. hand_force_y, N); or an "
                                              "OpenSim .mot/.sto with these columns or the DAS3 coordinates "
                                              "SC_y ... PS_y (docs/guides/opensim.md).")],
    amax: Annotated[float, typer.Option("--amax", help="Largest activation the subject reaches, a_max in (0, 1].")],
    tmax_pe: Annotated[float, typer.Option("--tmax-pe", help="Largest passive-torque multiplier, t_max^PE > 0.")],
    out: Annotated[Path, typer.Option(help="Output directory (created): mtg_fitted.json (load it with [plant] "
                                          "mtg_parameters), fit.json, envelopes.png.")],
    parameters: Annotated[Optional[Path], typer.Option(help="Starting MTG parameter file (default: the shipped "
                                                            "sim/data/mtg_default.json).")] = None,
    pre_weaken: Annotated[float, typer.Option(help="Scale every tau_o^M by this before fitting (the paper's "
                                                   "pre-weakening), in (0, 1].")] = 1.0,
    max_scale: Annotated[Optional[float], typer.Option(help="Upper bound on s_tau, s_a and s_v (e.g. from "
                                                            "dynamometry of a comparable subject, the paper's Sect. 3 "
                                                            "upper bound); default: none.")] = None,
    model_config: Annotated[Optional[Path], typer.Option(help="DAS3 model options TOML (segments).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print fit.json to stdout.")] = False,
) -> None:
    """Millard et al. 2019 Eqs. (7)-(12) for every MTG: the smallest change of (sA, sV, dP, lamP, s_tau) that
    makes the motion feasible (activations in [0, a_max], passive multiplier below t_max^PE), checked after the
    fact on the nonlinear model; exits 1 if any MTG stays infeasible."""
    with user_errors():
        check_output_dir(out, "--out")
        if max_scale is not None:
            positive("--max-scale", max_scale)
        from hil.reports.mtg_figure import plot_envelopes
        from sim.das3.model import load_model
        from sim.fitting.mtg_motion import fit_arm, joint_fit_summary, load_motion, weakened
        from sim.mtg.model import MtgModel, load_mtg_parameters, parameters_json

        das3 = load_model(load_model_options(model_config))
        try:
            start = weakened(load_mtg_parameters(parameters), pre_weaken)
            model = MtgModel(das3, start)
            recorded = load_motion(motion, model)
            t0 = time.perf_counter()
            result = fit_arm(start, recorded, amax, tmax_pe,
                             upper=None if max_scale is None else {k: max_scale for k in ("s_tau", "s_a", "s_v")})
        except ValueError as exc:
            raise BadInputError(str(exc)) from None
        elapsed = time.perf_counter() - t0
        out.mkdir(parents=True, exist_ok=True)
        fitted = result.fitted(f"fitted by `hil fit mtg` to {motion.name} (a_max {amax:g}, t_max^PE {tmax_pe:g}, "
                               f"pre-weakened {pre_weaken:g})")
        write_output_text(out / "mtg_fitted.json", json.dumps(parameters_json(fitted), indent=1) + "\n")
        report = {"motion": str(motion), "samples": int(recorded.time.size), "torques": recorded.torque_source,
                  "a_max": amax, "t_max_pe": tmax_pe, "pre_weaken": pre_weaken, "fit_time_s": round(elapsed, 3),
                  "feasible": result.feasible,
                  "mtgs": [row for coord, (fit, idx) in result.joints.items()
                           for row in joint_fit_summary(fit, [start.mtgs[i].name for i in idx])]}
        write_output_text(out / "fit.json", json.dumps(report, indent=1) + "\n")
        plot_envelopes(result, recorded, amax, str(out / "envelopes.png"))
        if json_out:
            print_json(report)
        else:
            _print_table(report, out)
        if not result.feasible:
            raise typer.Exit(ExitCode.ERROR)


def _print_table(report: dict, out: Path) -> None:
    table = Table(title=f"hil fit mtg ({report['samples']} samples, torques by {report['torques']}, "
                        f"{report['fit_time_s']} s)")
    for col in ("MTG", "before", "a before", "after", "a after", "s_tau", "s_a", "s_v", "dP deg", "lamP",
                "active"):
        table.add_column(col)
    for r in report["mtgs"]:
        f = r["fitted"]
        active = ", ".join([f"{k} x{v}" for k, v in r["active_constraints"].items() if k != "bounds" and v]
                           + r["active_constraints"]["bounds"])
        table.add_row(r["mtg"], "ok" if r["feasible_before"] else "infeasible",
                      "{:.3f}..{:.3f}".format(*r["activation_before"]),
                      "ok" if r["feasible_after"] else "INFEASIBLE", "{:.3f}..{:.3f}".format(*r["activation_after"]),
                      f"{f['s_tau']:.4f}", f"{f['s_a']:.4f}", f"{f['s_v']:.4f}", f"{f['delta_p_deg']:.3f}",
                      f"{f['lambda_p']:.4f}", active or "-")
    out_console().print(table)
    out_console().print(f"wrote {out / 'mtg_fitted.json'}, {out / 'fit.json'}, {out / 'envelopes.png'}")
