"""How the suite is organised (tests/conftest.py, tests/helpers.py, pyproject.toml): markers by folder and table,
the serial xdist group of the realtime and host-bus tests, the whole suite on two workers with numba's cache
warmed first, chosen files in one process, and helpers defined once."""
from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace

import conftest
import helpers
import pytest

ROOT = helpers.ROOT
TESTS = ROOT / "tests"


class Item(SimpleNamespace):
    """A collected test as the marking hook sees it: path, name, original name and the markers added."""

    def __init__(self, path: Path, name: str) -> None:
        super().__init__(path=path, name=name, originalname=name.split("[")[0], marks=[])

    def add_marker(self, mark) -> None:
        self.marks.append(mark.mark if hasattr(mark, "mark") else mark)

    def marked(self, name: str) -> list:
        return [m.args for m in self.marks if m.name == name]


def marked_items(*where: tuple[str, str]) -> list[Item]:
    """The items of ``where`` after the marking hook, in the order given (the hook reorders its list)."""
    items = [Item(TESTS / folder / "test_x.py" if "/" not in folder else TESTS / folder, name)
             for folder, name in where]
    conftest.pytest_collection_modifyitems(list(items))
    return items


def test_the_serial_group_is_collected_first():
    items = [Item(TESTS / "sim" / "test_x.py", "test_a"), Item(TESTS / "e2e" / "test_tick_stall.py", "test_b"),
             Item(TESTS / "hil" / "test_x.py", "test_c"), Item(TESTS / "drivers" / "test_can.py", "test_d")]
    conftest.pytest_collection_modifyitems(items)
    assert [i.name for i in items] == ["test_b", "test_d", "test_a", "test_c"]


def test_e2e_is_the_folder_and_realtime_the_table_and_both_serial_groups_hold_their_tests():
    e2e, flat, stall, p24, can, mtg_can, mtg_other = marked_items(
        ("e2e", "test_a"), ("sim", "test_a"), ("e2e/test_tick_stall.py", "test_a"),
        ("e2e/test_p24.py", "test_bench_link_measures_updates_and_pulses[p24-low]"),
        ("drivers/test_can.py", "test_dbc"),
        ("e2e/test_mtg_service.py", "test_a_can_controller_process_flexes_the_mtg_elbow_and_reads_no_gh_stability"),
        ("e2e/test_mtg_service.py", "test_the_loopback_elbow_hold"))
    assert e2e.marked("e2e") == [()] and mtg_can.marked("e2e") == [()]
    assert not flat.marked("e2e") and not can.marked("e2e")
    assert stall.marked("realtime") == [()] and p24.marked("realtime") == [()]
    assert not can.marked("realtime") and not mtg_can.marked("realtime") and not flat.marked("realtime")
    serial = [(conftest.SERIAL_GROUP,)]
    assert stall.marked("xdist_group") == p24.marked("xdist_group") == serial
    assert can.marked("xdist_group") == mtg_can.marked("xdist_group") == serial
    assert not mtg_other.marked("xdist_group") and not flat.marked("xdist_group") and not e2e.marked("xdist_group")


def test_every_table_entry_names_an_existing_module_and_test():
    """A renamed module or test would leave the serial group unnoticed (and run beside the tests it must not)."""
    modules = {path.stem: path for path in TESTS.rglob("test_*.py")}
    assert set(conftest.REALTIME) | set(conftest.HOST_BUSES) <= set(modules)
    for table in (conftest.REALTIME, conftest.HOST_BUSES):
        for module, names in table.items():
            text = modules[module].read_text()
            assert [name for name in names or () if f"\ndef {name}(" not in text] == [], module


def fake_config(args: tuple, from_testpaths: bool, worker: bool = False) -> SimpleNamespace:
    source = pytest.Config.ArgsSource.TESTPATHS if from_testpaths else pytest.Config.ArgsSource.ARGS
    config = SimpleNamespace(invocation_params=SimpleNamespace(args=args), args_source=source,
                             option=SimpleNamespace(numprocesses=2, dist="loadgroup", collectonly=False))
    config.getoption = lambda name, default=None: getattr(config.option, name, default)
    if worker:
        config.workerinput = {}
    return config


@pytest.mark.parametrize("args, from_testpaths, parallel", [
    (("-q",), True, True),                              # the README's command: the whole suite
    (("-q", "tests/sim/test_plant.py"), False, False),      # chosen files: one process
    (("-q", "-n", "2", "tests/sim/test_plant.py"), False, True),
    (("-q", "--numprocesses=2", "tests/sim/test_plant.py"), False, True),
])
def test_the_whole_suite_runs_on_workers_after_a_warm_up_and_chosen_files_in_one_process(args, from_testpaths,
                                                                                        parallel):
    config = fake_config(args, from_testpaths)
    conftest.pytest_configure(config)
    assert (config.option.numprocesses, config.option.dist) == ((2, "loadgroup") if parallel else (0, "no"))
    assert conftest._parallel_controller(config) is parallel
    worker = fake_config(args, from_testpaths, worker=True)
    conftest.pytest_configure(worker)
    assert worker.option.numprocesses == 2 and not conftest._parallel_controller(worker)


def test_pyproject_registers_the_markers_and_runs_two_workers_by_group():
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert {m.split(":")[0] for m in options["markers"]} >= {"slow", "e2e", "realtime"}
    assert "--strict-markers" in options["addopts"] and "-n 2 --dist loadgroup" in options["addopts"]
    assert options["pythonpath"].index(".") < options["pythonpath"].index("tests")


def test_the_packages_not_the_test_folders_of_their_names_are_imported_from_any_directory(tmp_path):
    """tests/ is on the path and holds folders named sim, drivers and hil: without the repository on the path
    (the editable install's finder comes after it), a test run from another directory would import tests/hil
    as a namespace package named hil."""
    probe = tmp_path / "test_probe.py"
    probe.write_text("import drivers, hil, sim\n\n\ndef test_probe():\n"
                     "    assert None not in (drivers.__file__, hil.__file__, sim.__file__)\n")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(ROOT),
                          "-c", str(ROOT / "pyproject.toml"), str(probe)], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]


def test_no_test_module_defines_a_shared_helper_again_or_imports_helpers_from_conftest():
    shared = {name for name, value in vars(helpers).items()
              if not name.startswith("_") and getattr(value, "__module__", None) == "helpers"}
    for path in sorted(TESTS.rglob("test_*.py")):
        tree = ast.parse(path.read_text(), str(path))
        defined = {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
        assert not defined & shared, f"{path.name} defines {sorted(defined & shared)}: import them from helpers"
        from_conftest = [node for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module == "conftest"]
        assert not from_conftest, f"{path.name} imports from conftest: plain helpers live in tests/helpers.py"


def test_the_parallel_controller_warms_the_cache_before_xdist_starts_its_workers(monkeypatch):
    warmed = []
    monkeypatch.setattr(conftest, "warm_numba_cache", warmed.append)
    for from_testpaths in (True, False):
        config = fake_config(("-q",), from_testpaths)
        conftest.pytest_configure(config)
        config.pluginmanager = SimpleNamespace(get_plugin=lambda name: name)
        conftest.pytest_sessionstart(SimpleNamespace(config=config))
    assert warmed == ["terminalreporter"]
    # before xdist's own hooks: its session start brings up the workers, its collection hook reads the groups
    assert conftest.pytest_sessionstart.pytest_impl["tryfirst"]
    assert conftest.pytest_collection_modifyitems.pytest_impl["tryfirst"]
