"""``hil bench gym`` and its peer's setup: the Gymnasium environments' throughput beside MyoSuite's."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from hil.cli import bench_tables
from hil.cli.common import BadInputError, ExitCode, count, err_console, error, out_console, print_json, user_errors

PEER_VENV = Path("runs/.venv-myosuite")
"""The peer's default virtual environment (``hil.bench.myo_peer.VENV``, which imports Gymnasium: not at start-up)."""


def bench_gym(
    envs: Annotated[str, typer.Option(help="Numbers of environments, comma-separated.")] = "1,8,64",
    steps: Annotated[int, typer.Option(help="Env steps measured per row (after a warm-up; 1 to 10^6).")] = 4000,
    plant: Annotated[str, typer.Option(help="das3, mtg or both.")] = "both",
    threads: Annotated[int, typer.Option(help="Numba threads of the batched environments (1 to 1024).")] = 1,
    rounds: Annotated[int, typer.Option(help="Alternating rounds per pair of rows; the median is shown (1 to 100).")] = 3,
    action_period_ms: Annotated[Optional[float], typer.Option(
        help="The environments' action period (default: the task's, 20 ms).")] = None,
    peer: Annotated[bool, typer.Option(help="Measure the MyoSuite peer in the same run.")] = True,
    peer_setup: Annotated[bool, typer.Option(
        help="Make the MyoSuite peer's virtual environment (--peer-venv, from the package index) first.")] = False,
    peer_venv: Annotated[Path, typer.Option(help="The MyoSuite peer's virtual environment.")]
    = PEER_VENV,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Env steps per second of fes_hil/ElbowHold-v0, wall clock and per CPU-second (all threads), for 1, 8 and
    64 environments: the batched vector environment against Gymnasium's SyncVectorEnv over the single one
    (goal: >= 2x per core at 8 envs), beside MyoSuite's elbow environment; with the machine and its steal."""
    from hil.gym.benchmark import gym_rows, with_peer

    with user_errors():
        try:
            counts = tuple(int(n) for n in envs.split(","))
        except ValueError:
            counts = ()
        if not counts or min(counts) < 1 or max(counts) > 1024:
            raise BadInputError(f"--envs: numbers of environments 1..1024, not {envs!r}")
        count("--steps", steps, 1, 1_000_000)
        plants = ("das3", "mtg") if plant == "both" else (plant,)
        if any(p not in ("das3", "mtg") for p in plants):
            raise BadInputError(f"--plant: das3, mtg or both, not {plant!r}")
        count("--rounds", rounds, 1, 100)
        if action_period_ms is not None and not 1.0 <= action_period_ms <= 1000.0:
            raise BadInputError(f"--action-period-ms: 1..1000, not {action_period_ms}")
        rows = gym_rows(plants, counts, steps, threads, rounds=rounds,
                        action_period_s=None if action_period_ms is None else action_period_ms / 1e3)
    doc, peer_rows = with_peer(rows, counts, steps, peer, peer_setup, err_console().print, peer_venv)
    doc["action_period_ms"] = action_period_ms or 20.0
    if json_out:
        print_json(doc)
        return
    bench_tables.print_gym(doc, rows + peer_rows)


def bench_peer_setup(
    venv: Annotated[Path, typer.Option(help="Where to make the MyoSuite peer's virtual environment.")]
    = PEER_VENV,
) -> None:
    """Make the MyoSuite peer of `hil bench gym` (a virtual environment with pinned MyoSuite, MuJoCo and
    Gymnasium from the package index; nothing to do when it is there). Part of the README's test command."""
    from hil.bench.myo_peer import PeerUnavailable, setup_venv
    try:
        out_console().print(setup_venv(venv))
    except PeerUnavailable as exc:
        error(str(exc))
        raise typer.Exit(ExitCode.ERROR) from None
