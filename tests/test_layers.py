"""The layers import one way, sim <- drivers <- hil, and no module reaches into another's private names:
a test walks every import statement of the three packages."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYER = {"sim": 0, "drivers": 1, "hil": 2}


def imports(path: Path):
    """(line, module, imported names) of every absolute import in a file."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module, [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, []


def violations(package: str) -> list[str]:
    found = []
    for path in sorted((ROOT / package).rglob("*.py")):
        own = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for line, module, names in imports(path):
            top = module.split(".")[0]
            if top not in LAYER:
                continue
            where = f"{path.relative_to(ROOT)}:{line}"
            if LAYER[top] > LAYER[package]:
                found.append(f"{where}: {package} imports {module} from a higher layer")
            private = [n for n in names if n.startswith("_") and not n.startswith("__")]
            if private and module != own:
                found.append(f"{where}: imports private {', '.join(private)} from {module}")
    return found


def test_layers_import_one_way_and_no_private_names():
    assert [v for package in LAYER for v in violations(package)] == []


def test_the_walk_sees_an_upward_import(tmp_path, monkeypatch):
    """The checker itself: an upward import and a private name in a scratch tree are both reported."""
    (tmp_path / "sim").mkdir()
    (tmp_path / "sim" / "bad.py").write_text("from hil.rt.loop import RealtimeLoop\nfrom sim.das3.model import _private\n")
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    found = violations("sim")
    assert len(found) == 2 and "higher layer" in found[0] and "_private" in found[1]


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
