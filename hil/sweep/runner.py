"""``hil sweep``: every variant of a sweep file (:mod:`hil.sweep.spec`) run offline (:func:`hil.rt.offline.run_offline`)
as an independent task, in this process or on Dask workers (a local cluster, or an existing one by its
scheduler address), with one results row per run (:mod:`hil.reports.run_metrics`).

Rows stream into ``DIR/results.jsonl`` as the runs finish (append-only: a sweep restarted into the same
directory skips every id already there) and ``DIR/results.csv`` is written from it at the end. A task that
raises is retried (``RETRIES``); Dask also reschedules the task of a worker that dies, up to the scheduler's
``distributed.scheduler.allowed-failures`` times. A variant whose config is invalid, whose plant diverges, or
whose task killed its workers that often, is a row with ``status`` "error" and the reason, not a failed sweep;
an error about a swept key names the sweep file and the key. Each variant's config document and input files
are checked here before anything runs (an invalid one is its error row at once), and a sweep none of whose
runs succeeds fails (:func:`failure`).
One run is a :class:`hil.sweep.task.RunTask`. On Dask, every worker is warmed once as it joins, not in its first run
(:mod:`hil.sweep.worker`), and a result is released as soon as its row is taken.
"""
from __future__ import annotations

import csv
import json
import os
import time

from distributed import Client, KilledWorker, as_completed

from hil.config import merged_document, service_config_from_dict
from hil.rt.plants import option_files
from hil.sweep.spec import SweepSpec, Variant, variants
from hil.sweep.task import RunTask, error_row, run_task
from hil.sweep.worker import local_cluster, warm_up
from sim.das3.config import ConfigError
from sim.errors import UserInputError
from sim.input_file import InputFileError, read_input_file
from sim.output_file import append_line, output_file

RETRIES = 2
METRIC_COLUMNS = ("status", "error", "ticks", "simulated_s", "wall_s", "stopped_by", "rms_error_deg",
                  "settling_time_s", "overshoot_deg", "final_error_deg", "gh_unstable_ticks", "gh_min_margin",
                  "watchdog_ticks", "recording")


def finished_ids(out_dir: str) -> set[str]:
    """Ids of the runs already in ``results.jsonl`` (a torn last line, from an interrupted sweep, is ignored)."""
    path = os.path.join(out_dir, "results.jsonl")
    if not os.path.lexists(path):
        return set()
    return {doc["id"] for doc in json_lines(path) if isinstance(doc.get("id"), str)}


def tasks(spec: SweepSpec, runs: list[Variant], out_dir: str) -> list[RunTask]:
    """The ``runs`` of ``spec`` not yet in ``out_dir``, with their config documents."""
    base = merged_document(spec.base)
    done = finished_ids(out_dir)
    runs_dir = os.path.join(out_dir, "runs")
    return [RunTask(v, base, spec.base, spec.duration_s,
                    os.path.join(runs_dir, f"{v.id}.hilrec") if spec.keep_recordings else None, spec.settling_band_rad,
                    spec.path)
            for v in runs if v.id not in done]


def _input_files(cfg) -> dict[str, str]:
    """The files a run of ``cfg`` reads besides its config, by key: the plant's initial state and the plant type's
    file options (e.g. MTG parameters, :func:`hil.rt.plants.option_files`)."""
    names = {"plant.initial": cfg.plant.initial} if cfg.plant.initial != "equilibrium" else {}
    names.update(option_files(cfg.plant))
    return {key: n if os.path.isabs(n) else os.path.join(cfg.base_dir, n) for key, n in names.items()}


def preflight(todo: list[RunTask]) -> tuple[list[RunTask], list[dict]]:
    """(tasks whose config document is valid and whose input files are readable regular files of a bounded
    size, error rows of the others): checked here, before any worker starts, each file read once."""
    file_errors: dict[str, str | None] = {}

    def check(task: RunTask) -> None:
        cfg = service_config_from_dict(task.raw, task.config_path)
        for key, name in _input_files(cfg).items():
            if name not in file_errors:
                try:
                    read_input_file(name)
                    file_errors[name] = None
                except InputFileError as exc:
                    file_errors[name] = str(exc)
                except OSError as exc:
                    file_errors[name] = f"{name}: {exc.strerror or exc}"
            if file_errors[name] is not None:
                raise ConfigError(file_errors[name], file=task.config_path, key=key)

    valid, rows = [], []
    for task in todo:
        try:
            check(task)
            valid.append(task)
        except (UserInputError, OSError, ValueError) as exc:
            rows.append(error_row(task, exc))
    return valid, rows


def _append(out_dir: str, row: dict) -> None:
    append_line(os.path.join(out_dir, "results.jsonl"), json.dumps(row, default=float) + "\n")


def json_lines(path: str):
    """The JSON objects of a JSON-lines file (a torn line, from an interrupted sweep, a damaged or a foreign one is
    skipped). The file must be a regular file (a FIFO or device: :class:`sim.input_file.InputFileError`, one line)."""
    text = read_input_file(path, None).decode("utf-8", errors="replace")
    for line in text.splitlines():
        try:
            doc = json.loads(line)
        except (json.JSONDecodeError, RecursionError):     # RecursionError: a line nested too deep to parse
            continue
        if isinstance(doc, dict):
            yield doc


def _rows(out_dir: str) -> list[dict]:
    """The rows of ``results.jsonl`` (none before the first run has ended)."""
    path = os.path.join(out_dir, "results.jsonl")
    return list(json_lines(path)) if os.path.exists(path) else []


def write_csv(out_dir: str, keys: list[str], rows: list[dict]) -> str:
    """``results.csv`` from the rows of ``results.jsonl``: id, the swept keys, the metric columns, the charge
    columns."""
    charge = sorted({k for r in rows for k in r if k.startswith("charge_")})
    columns = ["id", *keys, *METRIC_COLUMNS, *charge]
    path = os.path.join(out_dir, "results.csv")
    with output_file(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, columns, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    return path


def _local(todo: list[RunTask], on_row) -> None:
    for task in todo:
        on_row(run_task(task))


def _dask(todo: list[RunTask], on_row, workers: int, scheduler: str | None) -> dict:
    cluster = local_cluster(workers) if scheduler is None else None
    client = Client(scheduler or cluster)
    try:
        warm_up(client, todo)
        info = {"scheduler": client.scheduler.address, "workers": len(client.scheduler_info()["workers"])}
        _collect(client, todo, on_row)
        return info
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def _collect(client, todo: list[RunTask], on_row) -> None:
    """Every task submitted at once, each row to ``on_row`` as it arrives; a result is released once taken, so a
    worker lost later holds no finished run the scheduler would recompute."""
    by_key = {f"hil-run-{t.variant.id}": t for t in todo}
    for future in as_completed(client.map(run_task, list(by_key.values()), key=list(by_key), retries=RETRIES,
                                          pure=False)):
        try:
            row = future.result()
        except KilledWorker as exc:           # its workers died allowed-failures + 1 times: a row, not a crash
            v = by_key[future.key].variant
            row = {"id": v.id, **v.columns, "status": "error", "error": f"KilledWorker: {exc}"}
        future.release()
        on_row(row)


def run_sweep(spec: SweepSpec, out_dir: str, workers: int = 2, scheduler: str | None = None, progress=None) -> dict:
    """Run what is left of ``spec`` into ``out_dir``; ``workers`` 0 runs in this process; ``progress(row, done,
    total)`` after each run. Returns the counts, the wall time and where the results are."""
    os.makedirs(out_dir, exist_ok=True)
    runs = variants(spec)
    todo, invalid = preflight(tasks(spec, runs, out_dir))
    if spec.keep_recordings:
        os.makedirs(os.path.join(out_dir, "runs"), exist_ok=True)
    total, count = len(todo) + len(invalid), [0]

    def on_row(row):
        _append(out_dir, row)
        count[0] += 1
        if progress is not None:
            progress(row, count[0], total)

    t0 = time.perf_counter()
    info = {"scheduler": None, "workers": 0}
    for row in invalid:
        on_row(row)
    if todo:
        if workers == 0 and scheduler is None:
            _local(todo, on_row)
        else:
            info = _dask(todo, on_row, workers, scheduler)
    wall = time.perf_counter() - t0
    rows = _rows(out_dir)
    return {"runs": len(runs), "run_now": total, "skipped": len(runs) - total, "wall_s": wall,
            "results_csv": write_csv(out_dir, spec.keys, rows),
            "results_jsonl": os.path.join(out_dir, "results.jsonl"), **info, **outcome(rows)}


def outcome(rows: list[dict]) -> dict:
    """How the sweep's runs ended (all rows of ``results.jsonl``, earlier ones too): ``ok`` and ``errors`` counts,
    the ``first_error`` and whether every error is the input's (``input_errors``)."""
    ok, errors, first, inputs = 0, 0, None, True
    for row in rows:
        if row.get("status") == "ok":
            ok += 1
        elif row.get("status") == "error":
            errors += 1
            first = first or row.get("error")
            inputs = inputs and row.get("input_error", False)
    return {"ok": ok, "errors": errors, "first_error": first, "input_errors": errors > 0 and inputs}


def failure(summary: dict, sweep_path: str) -> str | None:
    """Why the sweep failed when none of its runs succeeded (its input's fault if ``input_errors``), else None."""
    if summary["ok"] or not summary["errors"]:
        return None
    return f"{sweep_path}: every run failed ({summary['errors']}); the first: {summary['first_error']}"
