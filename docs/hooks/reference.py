"""MkDocs hook: the reference pages generated from the code at build time.

A page asks for a generated part with an HTML comment ``<!-- gen:NAME -->`` (NAME one of :data:`GENERATORS`)
and for a repository file's text with ``<!-- include:PATH -->`` (PATH relative to the repository root).
The built site then always matches the code: the command line from the typer app, the config keys from the
config schemas, the frame, status and reject tables from ``drivers.core.contract``, the recording's record
types from the code that writes them, and the package map from the packages' own docstrings.
"""
from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import typer.main

from drivers.core import contract
from hil.cli import app
from hil.config_reference import config_sections
from hil.recording import hilrec
from hil.rt import engine
from sim.config_schema import sections_markdown

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("sim", "drivers", "hil")
MARKER = re.compile(r"<!-- (gen|include):([\w./-]+) -->")


def cell(text) -> str:
    """One Markdown table cell: a single line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|").replace("<", "&lt;")


def summary(doc: str | None, limit: int = 240) -> str:
    """A docstring's first paragraph, cut after its last full sentence within ``limit`` characters."""
    text = " ".join((doc or "").split("\n\n")[0].split())
    text = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", text).replace("``", "`")
    if len(text) <= limit:
        return text
    ends = [m.end() for m in re.finditer(r"(?<!\bal)(?<!\be\.g)(?<!\bi\.e)[.;]\s", text[:limit + 1])]
    return text[:ends[-1]].strip() if ends else text[:limit].rsplit(" ", 1)[0] + " …"


# -- command line ------------------------------------------------------------------------------------------
def _param_row(p, ctx) -> str:
    """One option or argument of a typer command (typer's own click-like classes, read by duck typing)."""
    if p.param_type_name == "argument":
        name, kind = f"`{p.name.upper()}`", "argument"
    else:
        name = ", ".join(f"`{o}`" for o in (*p.opts, *p.secondary_opts))
        kind = "flag" if getattr(p, "is_flag", False) else p.display_type(ctx).strip("<>")
    shown = p.default is not None and not callable(p.default) and not getattr(p, "is_flag", False)
    default = "required" if p.required else (repr(p.default) if shown else "")
    return f"| {name} | {cell(kind)} | {cell(default)} | {cell(p.help or '')} |"


def _command_md(cmd, path: str, level: int) -> list[str]:
    ctx = cmd.context_class(cmd, info_name=path)
    group = hasattr(cmd, "list_commands")
    out = [f"{'#' * level} `{path}`", ""]
    if cmd.help:
        out += [inspect.cleandoc(cmd.help).replace("\b", "").replace("<", "&lt;"), ""]
    out += ["```", cmd.get_usage(ctx).replace("Usage: ", ""), "```", ""]
    params = [p for p in cmd.get_params(ctx) if p.name != "help"]
    if params:
        out += ["| option | type | default | description |", "|---|---|---|---|", *(_param_row(p, ctx) for p in params),
                ""]
    if group:
        for name in cmd.list_commands(ctx):
            out += _command_md(cmd.get_command(ctx, name), f"{path} {name}", min(level + 1, 4))
    return out


def cli_reference() -> str:
    return "\n".join(_command_md(typer.main.get_command(app), "hil", 2))


# -- config ------------------------------------------------------------------------------------------------
def config_reference() -> str:
    return sections_markdown(config_sections(), title="Keys by table")


# -- contract and recording --------------------------------------------------------------------------------
def _field_comments(obj) -> dict[str, str]:
    """``("name", ...),  # comment`` lines of a dtype's source: field name -> comment."""
    src = inspect.getsource(obj)
    return {m.group(1): m.group(2).strip() for m in re.finditer(r'\("(\w+)",[^#\n]*#\s*(.*)', src)}


def _dtype_table(dtype, comments: dict[str, str]) -> list[str]:
    rows = ["| field | type | shape | meaning |", "|---|---|---|---|"]
    for name in dtype.names:
        base, shape = dtype[name].base, dtype[name].shape
        kind = "record" if base.names else base.str
        rows.append(f"| `{name}` | `{kind}` | {shape or ''} | {cell(comments.get(name, ''))} |")
    return rows + [""]


def _kinds(module) -> list[str]:
    src = inspect.getsource(module)
    rows = ["| kind | name | meaning |", "|---|---|---|"]
    for m in re.finditer(r"^KIND_(\w+) = (\d+)\s*(?:#\s*(.*))?$", src, re.M):
        rows.append(f"| {m.group(2)} | `{m.group(1).lower()}` | {cell(m.group(3) or '')} |")
    return rows + [""]


def contract_reference() -> str:
    out = ["## Status bits", "", "Bit i of a frame's `status` has the value 1 << i.", "",
           "| bit | value | name | meaning |", "|---|---|---|---|"]
    out += [f"| {i} | {1 << i} | `{n}` | {cell(d)} |" for i, (n, d) in enumerate(contract.STATUS_BITS)]
    out += ["", "## Sensor frame", "", "`drivers.core.contract.frame_dtype()`, little-endian, one per tick to "
            "every driver (shown for the DAS3's 11 DOFs):", ""]
    out += _dtype_table(contract.frame_dtype(), _field_comments(contract.frame_dtype))
    out += ["## Command log", "", "`drivers.core.contract.COMMAND_DTYPE`: one entry per command, reject "
            "count, lost driver or tick stall.", ""]
    out += _dtype_table(contract.COMMAND_DTYPE, _field_comments(contract))
    out += ["## Command kinds", ""] + _kinds(contract)
    out += ["## Reject reasons", "", "Recorded as `status` = code, counted per driver and reason "
            "(`hil_commands_rejected_total{driver,reason}`).", "", "| code | reason |", "|---|---|"]
    out += [f"| {i + 1} | `{r}` |" for i, r in enumerate(contract.REJECT_REASONS)]
    return "\n".join(out) + "\n"


def recording_reference() -> str:
    doc = inspect.getdoc(hilrec) or ""
    layout = doc.split("File layout (little-endian):", 1)[-1].split("\n\n", 2)[1]
    out = ["### File layout", "", "```", inspect.cleandoc(layout), "```", "",
           "### The `ticks` stream", "", "`hil.rt.engine.tick_dtype` (a run with a fatigue model adds "
           "`fitness` per channel before `frame`; `frame` is the [sensor frame](contract.md#sensor-frame)):", ""]
    ticks = engine.tick_dtype(8, 138, contract.frame_dtype(), fatigue=True)
    out += _dtype_table(ticks, _field_comments(engine.tick_dtype))
    out += ["### The `commands` stream", "", "The [command log](contract.md#command-log) entries, "
            "`drivers.core.contract.COMMAND_DTYPE`.", "", "### Header keys", "",
            "| key | type |", "|---|---|"]
    for key, kind in hilrec.RUN_HEADER_TYPES.items():
        kinds = kind if isinstance(kind, tuple) else (kind,)
        out.append(f"| `{key}` | {' or '.join(k.__name__ for k in kinds)} |")
    return "\n".join(out) + "\n"


# -- package map -------------------------------------------------------------------------------------------
def _docstring(path: Path) -> str | None:
    return ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))


def package_map() -> str:
    out = []
    for top in PACKAGES:
        for init in sorted((ROOT / top).rglob("__init__.py")):
            pkg = init.parent
            dotted = ".".join(pkg.relative_to(ROOT).parts)
            modules = sorted(p for p in pkg.glob("*.py") if p.name != "__init__.py")
            out += [f"### `{dotted}`", "", summary(_docstring(init), 400), ""]
            if modules:
                out += ["| module | what it is |", "|---|---|"]
                out += [f"| `{m.stem}` | {cell(summary(_docstring(m)))} |" for m in modules]
                out.append("")
    return "\n".join(out)


GENERATORS = {
    "cli": cli_reference,
    "config": config_reference,
    "contract": contract_reference,
    "recording": recording_reference,
    "package-map": package_map,
}


def _include(rel: str) -> str:
    """A repository file's Markdown without its first heading (the page has its own); its links to other
    repository files become the files' paths, since the site holds only the docs."""
    text = re.sub(r"\A# .*\n", "", (ROOT / rel).read_text(encoding="utf-8"))
    folder = Path(rel).parent

    def local(m: re.Match) -> str:
        target = m.group(2)
        if re.match(r"(https?:|#|mailto:)", target):
            return m.group(0)
        return f"{m.group(1)} (`{(folder / target).as_posix()}`)"
    return re.sub(r"\[([^\]]+)\]\(([^)\s]+)\)", local, text)


def on_page_markdown(markdown: str, page, config, files) -> str:
    def replace(m: re.Match) -> str:
        return GENERATORS[m.group(2)]() if m.group(1) == "gen" else _include(m.group(2))
    return MARKER.sub(replace, markdown)
