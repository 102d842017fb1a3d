"""The documentation: the site builds with ``mkdocs build --strict`` and works offline (no page or stylesheet
loads a script, stylesheet, font or image from another host), the README stays short and points at pages
that exist, no hand-written table row is too long to read, and the shipped example sweep is one that
``hil sweep`` accepts."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hil.sweep.runner import preflight, tasks
from hil.sweep.spec import load_sweep, variants

#: The repository root (found from mkdocs.yml, so the test can live in any subfolder of tests/).
ROOT = next(p for p in Path(__file__).resolve().parents if (p / "mkdocs.yml").is_file())
DOCS = ROOT / "docs"
README = ROOT / "README.md"
EXAMPLE_SWEEP = ROOT / "examples" / "sweeps" / "elbow-hold-gains.toml"

#: An element that loads what its src/href/data names (a link <a href> to a paper is not loaded).
REMOTE_ASSET = re.compile(
    r"<(script|link|img|source|iframe|video|audio|embed|object|image|use)\b[^>]*?"
    r"\b(src|href|data|srcset|xlink:href)\s*=\s*[\"']?\s*(https?:)?//", re.I)
REMOTE_CSS = re.compile(r"(url\(\s*[\"']?\s*(https?:)?//|@import\s+[\"']?(url\()?\s*[\"']?(https?:)?//)", re.I)
MAX_README_LINES = 260
MAX_TABLE_ROW = 300

#: One worker builds the site once for every test of this module.
pytestmark = pytest.mark.xdist_group("docs")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=900, env=env)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return out


def remote_assets(site_dir: Path) -> list[str]:
    """Every place in the built site's HTML and CSS that loads something from another host."""
    found = []
    for path in site_dir.rglob("*"):
        if path.suffix == ".html":
            text = path.read_text(encoding="utf-8", errors="replace")
            found += [f"{path.relative_to(site_dir)}: {m.group(0)[:120]}" for m in REMOTE_ASSET.finditer(text)]
            found += [f"{path.relative_to(site_dir)}: {m.group(0)}" for m in REMOTE_CSS.finditer(text)]
        elif path.suffix == ".css":
            text = path.read_text(encoding="utf-8", errors="replace")
            found += [f"{path.relative_to(site_dir)}: {m.group(0)}" for m in REMOTE_CSS.finditer(text)]
    return found


def test_site_builds_strict_and_loads_nothing_from_other_hosts(site):
    pages = list(site.rglob("*.html"))
    assert len(pages) >= 30 and (site / "reference" / "cli.html").is_file()
    assert remote_assets(site) == []


def test_remote_asset_check_sees_a_cdn_script_a_font_and_a_css_import(tmp_path):
    (tmp_path / "a.html").write_text('<p><a href="https://doi.org/x">paper</a></p>'
                                     '<script src="https://cdn.example/x.js"></script>'
                                     '<link rel="stylesheet" href="//fonts.googleapis.com/css?family=Roboto">')
    (tmp_path / "b.css").write_text('@import "https://fonts.example/f.css"; .x{background:url(https://e/i.png)}')
    assert len(remote_assets(tmp_path)) == 4


def test_generated_reference_matches_the_code(site):
    cli = (site / "reference" / "cli.html").read_text(encoding="utf-8")
    for command in ("hil run", "hil sweep", "hil bench plant", "hil analyze static-opt", "--metrics-port"):
        assert command in cli, command
    contract = (site / "reference" / "contract.html").read_text(encoding="utf-8")
    for name in ("gh_unstable", "rom_zeroed", "controller_malformed", "st_contact_force"):
        assert name in contract, name


def test_readme_is_short_and_its_docs_links_exist():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= MAX_README_LINES
    links = re.findall(r"\]\((docs/[^)#\s]+)", text)
    assert links, "the README links into docs/"
    assert [link for link in links if not (ROOT / link).is_file()] == []


def test_no_hand_written_table_row_is_over_300_characters():
    rows = [f"{p.relative_to(ROOT)}: {line[:80]}…" for p in [README, *DOCS.rglob("*.md")]
            for line in p.read_text(encoding="utf-8").splitlines()
            if line.startswith("|") and len(line) > MAX_TABLE_ROW]
    assert rows == []


def test_example_sweep_is_accepted_by_hil_sweep(tmp_path):
    spec = load_sweep(str(EXAMPLE_SWEEP))
    runs = variants(spec)
    assert len(runs) == 3 * 2 * 2 and set(spec.keys) == {
        "driver.0.kp_ma_per_rad", "sensor.angle_noise_deg", "driver.0.target_deg"}
    valid, errors = preflight(tasks(spec, runs, str(tmp_path)))
    assert errors == [] and len(valid) == len(runs)


@pytest.mark.parametrize("name", ["elbow-hold-patients.toml", "elbow-hold-population.toml"])
def test_every_patient_example_sweep_is_accepted(tmp_path, name):
    spec = load_sweep(str(EXAMPLE_SWEEP.with_name(name)))
    runs = variants(spec)
    valid, errors = preflight(tasks(spec, runs, str(tmp_path)))
    assert errors == [] and len(valid) == len(runs) > 1
