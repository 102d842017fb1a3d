"""MkDocs hook: the repository's example figures (``examples/**/*.png``) served with the site, so pages show
the same PNGs the tests and commands write there, without copies under ``docs/``."""
from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[2]
SHARED = ("examples",)


def on_files(files, config):
    for folder in SHARED:
        for png in sorted((ROOT / folder).rglob("*.png")):
            rel = png.relative_to(ROOT).as_posix()
            if files.get_file_from_path(rel) is None:
                files.append(File(rel, str(ROOT), config["site_dir"], config["use_directory_urls"]))
    return files
