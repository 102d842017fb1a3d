"""The three packages keep the shape a newcomer can read, checked by walking every module's source:

- layers import one way, ``sim`` <- ``drivers`` <- ``hil``;
- no module takes a private name from another module, nor a private module (a dotted path with a part
  starting with ``_``) from another top-level package;
- first-party imports sit at module top, where an import cycle shows, except the lazy command bodies of
  :data:`LAZY_IMPORTS`;
- the service core (:data:`CORE`) never imports the live view (the CLI wires the two);
- no package folder holds more than :data:`MAX_MODULES` modules and no module more than :data:`MAX_LINES` lines.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAYER = {"sim": 0, "drivers": 1, "hil": 2}
MAX_MODULES = 15
MAX_LINES = 500
CORE = ("hil.rt", "hil.service", "hil.safety", "hil.telemetry", "hil.recording")
VIEW = "hil.view"
#: Folders whose functions may import first-party modules, with the reason. Nothing outside ``hil.cli`` but
#: ``python -m hil`` imports ``hil.cli`` (checked), so a lazy import there cannot hide a cycle; it keeps
#: ``hil --help``, ``hil check-config`` and shell completion from loading numba, scipy, matplotlib and dask.
LAZY_IMPORTS = {"hil.cli": "command bodies import their implementation when the command runs"}


def imports(path: Path):
    """(line, module, imported names, inside a function body) of every absolute import in a file."""
    tree = ast.parse(path.read_text(), str(path))
    nested = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
              for n in ast.walk(f) if n is not f}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module, [a.name for a in node.names], id(node) in nested
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, [], id(node) in nested


def dotted(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def import_violations(path: Path) -> list[str]:
    """What one module's imports break (see the module docstring)."""
    own = dotted(path)
    package = own.split(".")[0]
    found = []
    for line, module, names, in_function in imports(path):
        top = module.split(".")[0]
        if top not in LAYER:
            continue
        where = f"{path.relative_to(ROOT)}:{line}"
        if LAYER[top] > LAYER[package]:
            found.append(f"{where}: {package} imports {module} from a higher layer")
        private = [n for n in names if n.startswith("_") and not n.startswith("__")]
        if private and module != own:
            found.append(f"{where}: imports private {', '.join(private)} from {module}")
        if top != package and any(p.startswith("_") and not p.startswith("__") for p in module.split(".")):
            found.append(f"{where}: imports {module}, private to {top}")
        lazy = next((p for p in LAZY_IMPORTS if within(own, p)), None)
        if in_function and (lazy is None or within(module, lazy)):
            found.append(f"{where}: imports {module} inside a function (first-party imports go at module top)")
        if within(module, "hil.cli") and not within(own, "hil.cli") and own != "hil.__main__":
            found.append(f"{where}: imports the command line {module}")
        if within(module, VIEW) and any(within(own, core) for core in CORE):
            found.append(f"{where}: the service core imports the live view {module}")
    return found


def size_violations(package: str) -> list[str]:
    """Folders of more than MAX_MODULES modules, modules of more than MAX_LINES lines."""
    found = []
    for folder in sorted(p for p in [ROOT / package, *(ROOT / package).rglob("*")] if p.is_dir()):
        count = len(list(folder.glob("*.py")))
        if count > MAX_MODULES:
            found.append(f"{folder.relative_to(ROOT)}: {count} modules (at most {MAX_MODULES})")
    for path in sorted((ROOT / package).rglob("*.py")):
        lines = len(path.read_text().splitlines())
        if lines > MAX_LINES:
            found.append(f"{path.relative_to(ROOT)}: {lines} lines (at most {MAX_LINES})")
    return found


def violations(package: str) -> list[str]:
    """Every rule of the module docstring a module or folder of ``package`` breaks, one line each."""
    found = [v for path in sorted((ROOT / package).rglob("*.py")) for v in import_violations(path)]
    return found + size_violations(package)


def test_layers_import_one_way_and_no_private_names():
    assert [v for package in LAYER for v in violations(package)] == []


def scratch(tmp_path, monkeypatch, files: dict[str, str]) -> None:
    """A scratch tree of these files (path: source) that the checks walk instead of the repository."""
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)


def test_the_walk_sees_an_upward_import(tmp_path, monkeypatch):
    """The checker itself: an upward import and a private name in a scratch tree are both reported."""
    scratch(tmp_path, monkeypatch, {"sim/bad.py": "from hil.rt.loop import RealtimeLoop\n"
                                                  "from sim.das3.model import _private\n"})
    found = violations("sim")
    assert len(found) == 2 and "higher layer" in found[0] and "_private" in found[1]


def test_the_walk_sees_a_private_module_of_another_package(tmp_path, monkeypatch):
    """``sim._x`` and ``sim.foo._bar`` from drivers are reported; sim's own private modules are its own."""
    scratch(tmp_path, monkeypatch, {"drivers/bad.py": "import sim._x\nfrom sim.foo._bar import step\n",
                                    "sim/ok.py": "from sim.foo._bar import step\n"})
    found = violations("drivers")
    assert len(found) == 2 and all("private to sim" in v for v in found)
    assert violations("sim") == []


def test_the_walk_sees_an_import_inside_a_function(tmp_path, monkeypatch):
    """A first-party import in a function body is reported outside hil.cli, and inside it when it names the
    command line itself; a standard-library one is not; nothing below the CLI may import it."""
    body = "def f():\n    import json\n    from drivers.ipc.link import LinkDriver\n"
    scratch(tmp_path, monkeypatch, {"drivers/bad.py": body, "hil/cli/ok.py": body,
                                    "hil/cli/bad.py": "def f():\n    from hil.cli.ok import f\n",
                                    "hil/rt/bad.py": "from hil.cli import app\n"})
    assert [v.split(":")[0] for v in violations("drivers")] == ["drivers/bad.py"]
    found = violations("hil")
    assert len(found) == 2 and "hil/cli/bad.py:2: imports hil.cli.ok inside a function" in found[0]
    assert "imports the command line hil.cli" in found[1]


def test_the_walk_sees_the_core_importing_the_view(tmp_path, monkeypatch):
    scratch(tmp_path, monkeypatch, {"hil/service/bad.py": "from hil.view.block import ViewBlock\n",
                                    "hil/cli/ok.py": "from hil.view.block import ViewBlock\n"})
    found = violations("hil")
    assert len(found) == 1 and "core imports the live view hil.view.block" in found[0]


def test_the_walk_sees_a_crowded_folder_and_a_long_module(tmp_path, monkeypatch):
    files = {f"sim/many/m{i}.py": "" for i in range(MAX_MODULES + 1)}
    files["sim/long.py"] = "x = 1\n" * (MAX_LINES + 1)
    files["sim/full.py"] = "x = 1\n" * MAX_LINES
    scratch(tmp_path, monkeypatch, files)
    assert violations("sim") == [f"sim/many: {MAX_MODULES + 1} modules (at most {MAX_MODULES})",
                                 f"sim/long.py: {MAX_LINES + 1} lines (at most {MAX_LINES})"]


PLUGIN = '''
from drivers.core.interface import Driver
from drivers.core.config_table import ConfigTable


class Heartbeats(Driver):
    """A third-party driver: a heartbeat every tick, stimulation never."""
    name = "heartbeats"

    @classmethod
    def parse_config(cls, table, ctx):
        t = ConfigTable(table, ctx.key, ctx.file)
        t.get("type")
        every = t.integer("every", 1, 1, 1000)
        t.done()
        return every

    @classmethod
    def open(cls, spec, ctx):
        driver = cls(ctx.index)
        driver.every = spec
        return driver

    def fetch(self, tick, now_ns, sink):
        if tick % self.every == 0:
            sink.heartbeat(self.index, now_ns)

    def publish(self, frame):
        self.frames_published += 1
'''


def test_a_third_party_driver_registers_through_its_entry_point(tmp_path, config_over):
    """A package on the path whose metadata names a Driver under ``fes_hil.drivers`` is a driver type:
    ``hil check-config`` validates its table with its own parse_config, and ``hil run`` opens and runs it."""
    import json
    import os
    import subprocess
    import sys
    site = tmp_path / "site"
    (site / "hil_heartbeats-1.0.dist-info").mkdir(parents=True)
    (site / "hil_heartbeats.py").write_text(PLUGIN)
    (site / "hil_heartbeats-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: hil-heartbeats\n"
                                                                    "Version: 1.0\n")
    (site / "hil_heartbeats-1.0.dist-info" / "entry_points.txt").write_text(
        "[fes_hil.drivers]\nheartbeats = hil_heartbeats:Heartbeats\n")
    env = dict(os.environ, PYTHONPATH=str(site))
    cfg = config_over("elbow-hold.toml", """
        [metrics]
        enabled = false
        [[driver]]
        type = "heartbeats"
        every = 5
        """)
    run = [sys.executable, "-m", "hil"]
    out = subprocess.run([*run, "check-config", str(cfg)], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0 and "heartbeats" in out.stdout, out.stderr
    out = subprocess.run([*run, "run", "--config", str(cfg), "--duration", "0.4", "--json", "--record",
                          str(tmp_path / "r.hilrec")], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["commands_received"] == 20            # 100 ticks, a heartbeat every 5th
    bad = config_over("elbow-hold.toml", '[[driver]]\ntype = "heartbeats"\nevery = 0\n', name="bad.toml")
    out = subprocess.run([*run, "check-config", str(bad)], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 2 and "driver[0].every" in out.stderr, out.stderr
