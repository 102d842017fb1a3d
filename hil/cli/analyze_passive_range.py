"""``hil analyze passive-range``: the patient's elbow range under a standard moment on both arms
(:mod:`sim.analysis.passive_range`)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from hil.cli.common import BadInputError, load_model_options, out_console, print_json, user_errors
from sim.analysis import passive_range as pr

ABLE = "able-bodied"


def _plants(who):
    """(plant, arm) -> a factory of that plant at rest: the DAS3 and the MTG arm, able-bodied and ``who``."""
    from sim.das3.model import load_model
    from sim.das3.plant import Plant
    from sim.mtg.model import mtg_model_for
    from sim.mtg.plant import MtgPlant
    from sim.patient import Patient, apply_patient

    models = {}
    for arm, patient in ((ABLE, Patient()), (who.name, who)):
        config = apply_patient(load_model_options(None), patient)
        models[arm] = (load_model(config), mtg_model_for(config, patient))
    factories = {("das3", arm): (lambda model=das3: Plant(model)) for arm, (das3, _) in models.items()}
    factories.update({("mtg", arm): (lambda model=mtg: MtgPlant(model)) for arm, (_, mtg) in models.items()})
    return factories


def _summary(ranges: dict) -> list[dict]:
    return [{"plant": plant, "arm": arm, "extension_deg": math.degrees(r.extension_rad),
             "rest_deg": math.degrees(r.rest_rad), "flexion_deg": math.degrees(r.flexion_rad),
             "range_deg": math.degrees(r.range_rad), "unsettled_Nm": r.unsettled()}
            for (plant, arm), r in ranges.items()]


def _table(rows: list[dict], moment_nm: float) -> Table:
    table = Table(title=f"Elbow flexion after each hold (deg): -{moment_nm:g} N m (extension end), 0 (rest), "
                        f"+{moment_nm:g} N m (flexion end)")
    for column in ("plant", "arm", "extension end", "rest", "flexion end", "range"):
        table.add_column(column)
    for r in rows:
        table.add_row(r["plant"], r["arm"], *(f"{r[k]:.1f}" for k in ("extension_deg", "rest_deg", "flexion_deg",
                                                                       "range_deg")))
    return table


def passive_range(
    patient: Annotated[str, typer.Option(help="The virtual patient (preset name or patient file).")],
    moment_nm: Annotated[float, typer.Option(help="The standard elbow moment, N m.")] = pr.STANDARD_MOMENT_NM,
    seconds: Annotated[float, typer.Option(help="How long each moment is held, s.")] = pr.HOLD_S,
    out: Annotated[Optional[Path], typer.Option(
        help="Output directory (created): passive_range.csv and passive_range.png.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the ends of each hold as JSON.")] = False,
) -> None:
    """The elbow's passive range under a standard moment, as a contracture is measured (Diong et al. 2012): the
    unstimulated arm held under an extension moment, none and a flexion moment, on the DAS3 and the MTG arm,
    able-bodied and the patient; prints where the elbow ends each hold."""
    from hil.patients import load_patient
    from hil.reports.passive_range_figure import write_passive_range

    with user_errors():
        try:
            pr.check_hold(moment_nm, seconds)
        except ValueError as exc:
            raise BadInputError(str(exc)) from None
        who = load_patient(patient)
        ranges = {key: pr.passive_range(make, moment_nm, seconds) for key, make in _plants(who).items()}
    rows = _summary(ranges)
    if json_out:
        print_json({"patient": who.name, "moment_Nm": moment_nm, "hold_s": seconds, "holds": rows})
    else:
        out_console().print(_table(rows, moment_nm))
        for r in rows:
            if r["unsettled_Nm"]:
                out_console().print(f"{r['plant']}, {r['arm']}: still moving at the end of the hold at "
                                    f"{', '.join(f'{m:+g}' for m in r['unsettled_Nm'])} N m (hold longer)")
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        paths = write_passive_range(out, ranges, f"passive range, {who.name}")
        if not json_out:
            out_console().print(f"wrote {paths[0]} and {paths[1]}")
