"""``hil analyze passive-range``: a contracture measured as in the clinic (sim.analysis.passive_range), on the DAS3
and the MTG arm, able-bodied against the patient; bad input is one line."""
from __future__ import annotations

import csv
import json

import pytest
from helpers import assert_one_error_line, hil

FLEXORS = ("bicl", "bicb", "brachialis", "brachiorad")


@pytest.fixture(scope="module")
def flexor_patient(tmp_path_factory):
    path = tmp_path_factory.mktemp("patient") / "tight.toml"
    path.write_text('[patient]\nname = "tight"\n' + "".join(f"[patient.groups.{g}]\ncontracture_lceopt = 0.1\n"
                                                             for g in FLEXORS))
    return path


def test_a_flexor_contracture_takes_extension_range_on_both_arms(flexor_patient, tmp_path):
    """The elbow-flexor groups at 0.1 Lceopt lose more than the 10 deg of extension at a standard moment by which
    Diong et al. (2012) count a contracture, on both arms, and the MTG arm's ends follow the DAS3 arm's."""
    out = hil("analyze", "passive-range", "--patient", flexor_patient, "--out", tmp_path, "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    holds = {(h["plant"], h["arm"]): h for h in doc["holds"]}
    assert doc["moment_Nm"] == 1.0 and len(holds) == 4
    for plant in ("das3", "mtg"):
        able, tight = holds[(plant, "able-bodied")], holds[(plant, "tight")]
        assert tight["extension_deg"] > able["extension_deg"] + 10.0, plant
        for h in (able, tight):
            assert h["extension_deg"] < h["rest_deg"] < h["flexion_deg"] and not h["unsettled_Nm"], h
    for arm in ("able-bodied", "tight"):
        assert holds[("mtg", arm)]["extension_deg"] == pytest.approx(holds[("das3", arm)]["extension_deg"], abs=3.0)
    with open(tmp_path / "passive_range.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 4 * 3 * 1500 and (tmp_path / "passive_range.png").stat().st_size > 10_000


@pytest.mark.parametrize("args, words", [
    (("--moment-nm", "0"), ("moment", "[0.01, 20] N m")),
    (("--moment-nm", "nan"), ("moment",)),
    (("--seconds", "1e9"), ("hold", "[0.1, 30] s")),
    (("--patient", "nobody"), ("unknown preset 'nobody'",)),
])
def test_a_bad_hold_or_patient_is_one_error_line(args, words):
    base = {"--patient": "c5-tetraplegia"}
    base.update(dict(zip(args[::2], args[1::2])))
    out = hil("analyze", "passive-range", *[x for kv in base.items() for x in kv])
    assert_one_error_line(out.returncode, out.stderr, *words)


@pytest.mark.parametrize("command", ["passive-range", "catch"])
def test_an_output_that_is_a_file_is_one_line_before_anything_runs(tmp_path, command):
    """``--out`` names a file, not a directory: one line before the holds or the catch test run (it was a
    FileExistsError traceback after them)."""
    taken = tmp_path / "taken"
    taken.write_text("x")
    patient = "c5-tetraplegia" if command == "passive-range" else "stroke-hemiparesis"
    out = hil("analyze", command, "--patient", patient, "--out", taken)
    assert_one_error_line(out.returncode, out.stderr, f"--out {taken} is a file, not a directory")
    assert taken.read_text() == "x"
