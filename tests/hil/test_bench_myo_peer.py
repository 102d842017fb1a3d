"""The MyoSuite peer of ``hil bench gym``: one clear line when it cannot run; its JSON rows when it can, in the
virtual environment the README's test command makes before the tests (``hil bench peer-setup``: the tests
themselves download nothing)."""
import json
import subprocess
import sys

import pytest
from helpers import hil

from hil.bench.myo_peer import (
    ELBOW_ENV,
    ROOT,
    SETUP_HINT,
    VENV,
    PeerUnavailable,
    measure_peer,
    parse_output,
    venv_python,
)


def one_line(exc: pytest.ExceptionInfo) -> str:
    message = str(exc.value)
    assert "\n" not in message and "Traceback" not in message
    return message


def test_not_installed_says_so_in_one_line(tmp_path):
    with pytest.raises(PeerUnavailable) as exc:
        measure_peer(venv=tmp_path / "absent")
    message = one_line(exc)
    assert "MyoSuite peer not installed" in message and "hil bench gym --peer-setup" in message


def test_a_venv_without_myosuite_says_what_it_lacks(tmp_path):
    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    with pytest.raises(PeerUnavailable) as exc:
        measure_peer(counts=(1,), steps=10, warmup=0, venv=venv)
    message = one_line(exc)
    assert "lacks" in message and "--peer-setup" in message


def test_child_failures_become_one_line():
    with pytest.raises(PeerUnavailable, match="^MyoSuite 3.0.0 has no environment x$"):
        parse_output('{"error": "MyoSuite 3.0.0 has no environment x"}\n', "", 0)
    with pytest.raises(PeerUnavailable) as exc:
        parse_output("", "Traceback (most recent call last):\n  File x\nRuntimeError: mj_step: bad\n", 1)
    assert one_line(exc) == "the MyoSuite peer failed (exit 1): RuntimeError: mj_step: bad"
    with pytest.raises(PeerUnavailable, match="exit 0"):
        parse_output("", "", 0)


@pytest.fixture(scope="module")
def myosuite_venv():
    """The peer's virtual environment made by the test command's ``hil bench peer-setup``."""
    venv = ROOT / VENV
    if not venv_python(venv).exists():
        pytest.skip(f"no MyoSuite peer in {venv}: {SETUP_HINT}")
    return venv


@pytest.mark.slow
def test_myosuite_elbow_runs_through_the_peer(myosuite_venv):
    result = measure_peer(counts=(1, 2), steps=220, warmup=10, modes=("single", "sync"), venv=myosuite_venv)
    (model,) = result.models
    assert (model.env_id, model.muscles, model.dofs, model.frame_skip) == (ELBOW_ENV, 6, 1, 10)
    assert model.control_period_s == pytest.approx(model.timestep_s * model.frame_skip)
    assert [(r.num_envs, r.env_steps) for r in result.rows] == [(1, 220), (1, 220), (2, 220)]
    for row in result.rows:
        assert row.cpu_s > 0 and row.episodes >= 2               # 100 steps an episode: autoresets counted
        assert row.control_period_s == model.control_period_s
        assert json.loads(json.dumps(row.as_dict()))["label"].startswith(f"MyoSuite {ELBOW_ENV}")


def test_peer_setup_that_cannot_make_the_venv_says_so_in_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")                                     # a file where the venv's parent folder should be
    out = hil("bench", "peer-setup", "--venv", blocker / "venv")
    assert out.returncode == 1 and "Traceback" not in out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("Error: setting up the MyoSuite peer failed") and "venv" in line


def test_the_cli_default_venv_is_the_peers():
    from hil.cli.bench_gym import PEER_VENV
    assert PEER_VENV == VENV
