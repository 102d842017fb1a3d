"""``hil analyze catch`` and ``hil analyze passive-range``: a virtual patient's elbow as the clinic tests it, the
catch test of a spastic elbow (:mod:`sim.fitting.spasticity`) and the range under a standard moment
(:mod:`sim.analysis.passive_range`)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Optional

import numpy as np
import typer
from rich.table import Table

from hil.cli.common import BadInputError, check_output_dir, out_console, print_json, user_errors
from sim.analysis import passive_range as pr

ABLE = "able-bodied"


PLANTS = ("das3", "mtg")


def _arm(plant: str, patient, **changes):
    """(the model of ``plant``, das3 or mtg, for ``patient``, with the model options' fields ``changes``
    replaced (:func:`hil.patients.patient_arm`); its plant class)."""
    from hil.patients import patient_arm
    from sim.das3.plant import Plant
    from sim.mtg.plant import MtgPlant

    if plant not in PLANTS:
        raise BadInputError(f"--plant must be {' or '.join(PLANTS)}, not {plant!r}")
    return patient_arm(plant, patient, **changes), (Plant if plant == "das3" else MtgPlant)


def _plants(who):
    """(plant, arm) -> a factory of that plant at rest: the DAS3 and the MTG arm, able-bodied and ``who``."""
    from sim.patient import Patient

    factories = {}
    for plant in PLANTS:
        for arm, patient in ((ABLE, Patient()), (who.name, who)):
            model, plant_class = _arm(plant, patient)
            factories[(plant, arm)] = lambda model=model, plant_class=plant_class: plant_class(model)
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
        if out is not None:
            check_output_dir(out, "--out")
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
        with user_errors():
            out.mkdir(parents=True, exist_ok=True)
            paths = write_passive_range(out, ranges, f"passive range, {who.name}")
        if not json_out:
            out_console().print(f"wrote {paths[0]} and {paths[1]}")


def catch(
    patient: Annotated[str, typer.Option(help="The virtual patient (preset name or patient file) with spastic "
                                              "groups, e.g. stroke-hemiparesis.")],
    plant: Annotated[str, typer.Option(help="The arm: das3, or mtg (the reduced arm, the patient's reflexes on "
                                            "its actuators).")] = "das3",
    out: Annotated[Optional[Path], typer.Option(help="Output directory (created): catch.csv and catch.png.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the peaks as JSON.")] = False,
) -> None:
    """The clinical catch test of the patient's elbow: a servo extends the passive elbow from 90 to 40 deg at
    5 and at 100 deg/s; prints the peak reflex moment of each (the arm with its stretch reflexes minus the same
    arm without)."""
    from hil.patients import load_patient
    from hil.reports.catch_figure import write_catch
    from sim.fitting import spasticity as sp

    with user_errors():
        if out is not None:
            check_output_dir(out, "--out")
        who = load_patient(patient)
        if not any(g.spasticity for _, g in who.groups):
            raise BadInputError(f"patient {who.name!r} has no spastic group ([patient.groups.<group>.spasticity])")
        spastic, still, plant_of = _catch_arms(who, plant)
        runs = {speed: sp.catch_test(spastic, still, speed, plant_of=plant_of)
                for speed in (sp.SLOW_DEG_S, sp.FAST_DEG_S)}
    peaks = {f"{speed:g}": float(np.max(moment)) for speed, (_, moment) in runs.items()}
    if json_out:
        print_json({"patient": who.name, "plant": plant, "peak_reflex_moment_Nm": peaks})
    else:
        for speed, peak in peaks.items():
            out_console().print(f"{who.name} ({plant} arm): elbow extended at {speed} deg/s, peak reflex moment "
                                f"{peak:.3f} N m")
    if out is not None:
        with user_errors():
            out.mkdir(parents=True, exist_ok=True)
            paths = write_catch(out, runs, sp.STEP_S, f"catch test, {who.name}, {plant} arm")
        if not json_out:
            out_console().print(f"wrote {paths[0]} and {paths[1]}")


def _catch_arms(who, plant: str):
    """(the spastic arm, the same arm without stretch reflexes, its plant class) of patient ``who`` on ``plant``;
    the DAS3 arm without reflexes keeps the spastic one's rest state (:func:`sim.fitting.spasticity.with_reflex`,
    no equilibrium solved again)."""
    from sim.fitting import spasticity as sp

    spastic, plant_class = _arm(plant, who)
    still = sp.with_reflex(spastic, ()) if plant == "das3" else _arm(plant, who, spasticity=())[0]
    return spastic, still, plant_class
