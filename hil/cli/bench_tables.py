"""The tables and notes ``hil bench`` prints for the loop, link and sweep benchmarks (:mod:`hil.cli.bench`)."""
from __future__ import annotations

from pathlib import Path

from rich.table import Table

from hil.cli.common import out_console


def print_loop(doc: dict, cpu: int) -> None:
    from hil.bench.loop import LOOP_PRIORITY

    period, duration, floor = doc["period_s"], doc["duration_s"], doc.get("baseline")
    table = Table(title=f"hil bench loop: {period * 1e3:g} ms period, {duration:g} s, {doc['scrapes']} scrapes")
    table.add_column("per tick")
    for k in ("p50", "p99", "p99.9", "max"):
        table.add_column(f"{k} (µs)", justify="right")
    table.add_row("lateness", *(f"{doc[k]:.1f}" for k in ("p50_us", "p99_us", "p999_us", "max_us")))
    table.add_row("compute", *(f"{doc['compute_us'][k]:.1f}" for k in ("p50", "p99", "p99.9", "max")))
    console = out_console()
    console.print(table)
    console.print(f"late > 1 ms: {doc['misses_over_1ms']}; CPU {doc['cpu_percent']:.0f} % of the real-time process; "
                  "median per phase (µs): " + ", ".join(f"{k} {v:.1f}" for k, v in doc["tick_phases_us"].items()))
    rt = doc["realtime"]
    console.print(f"SCHED_FIFO {'yes' if rt['sched_fifo'] else 'no'}, mlock {'yes' if rt['mlock'] else 'no'}; "
                  f"CPU {doc['cpu']}")
    if doc["steal_ms_loop_cpu"] is not None:
        console.print(f"hypervisor steal on the loop CPU (cpu{cpu}) during the run: {doc['steal_ms_loop_cpu']:.0f} ms")
    if floor is not None and "error" in floor:
        console.print(f"platform baseline: {floor['error']}")
    elif floor is not None:
        steal = "" if floor["steal_ms"] is None else f", steal {floor['steal_ms']:.0f} ms"
        console.print(f"platform baseline (cyclictest, cpu{cpu}, FIFO {LOOP_PRIORITY}, {duration:g} s before "
                      f"the run): p50 {floor['p50_us']:.0f} µs, p99 {floor['p99_us']:.0f} µs, p99.9 "
                      f"{floor['p999_us']:.0f} µs, max {floor['max_us']:.0f} µs, "
                      f"late > 1 ms {floor['over_1ms']}{steal}")


def print_link_table(doc: dict, duration: float, baseline: bool) -> None:
    table = Table(title=f"hil bench link --transport {doc['transport']} ({duration:g} s per rate); round trip = "
                        "command sent in answer to feedback -> feedback echoing it")
    for col in ("rate (Hz)", *(("run",) if baseline else ()), "commands", "p50 (ms)", "p99 (ms)", "max (ms)",
                "goal p99 (ms)", "next tick %", "lost frames", "unanswered"):
        table.add_column(col, justify="right")
    for run in doc["runs"]:
        for label, row in (("floor", run.get("baseline")), ("HIL", run)):
            if row is None:
                continue
            what = (label,) if baseline else ()
            if "error" in row:
                table.add_row("error", *what, row["error"])
                continue
            table.add_row(f"{row['rate_hz']:g}", *what, str(row["commands_sent"]),
                          f"{row['rtt_p50_ms']:.2f}", f"{row['rtt_p99_ms']:.2f}", f"{row['rtt_max_ms']:.2f}",
                          f"{row['goal_rtt_p99_ms']:.2f}", f"{row['applied_next_tick_percent']:.1f}",
                          str(row["lost_frames"]), str(row["unanswered"]))
    out_console().print(table)


def print_lsl_table(doc: dict, duration: float) -> None:
    """The LSL runs: command sample -> applied (the start of the tick that applied it) and tick -> outlet
    sample (its arrival in the peer)."""
    table = Table(title=f"hil bench link --transport lsl ({duration:g} s per rate): command sample -> applied, "
                        "tick start -> outlet sample received")
    for col in ("rate (Hz)", "commands", "applied p50 (ms)", "p99 (ms)", "max (ms)", "next tick %", "superseded",
                "outlet p50 (ms)", "p99 (ms)", "max (ms)", "lost samples"):
        table.add_column(col, justify="right")
    for row in doc["runs"]:
        if "error" in row:
            table.add_row("error", row["error"])
            continue
        table.add_row(f"{row['rate_hz']:g}", str(row["commands_sent"]), f"{row['applied_p50_ms']:.2f}",
                      f"{row['applied_p99_ms']:.2f}", f"{row['applied_max_ms']:.2f}",
                      f"{row['applied_next_tick_percent']:.1f}", str(row["commands_superseded"]),
                      f"{row['outlet_p50_ms']:.2f}", f"{row['outlet_p99_ms']:.2f}", f"{row['outlet_max_ms']:.2f}",
                      str(row["lost_frames"]))
    out_console().print(table)


def print_link_notes(doc: dict, baseline: bool) -> None:
    """Below the table: what the floor is, each run's feedback, loop lateness and steal, where lost frames
    went, the CPU, and a note when kernel workers may share the loop's CPU."""
    console = out_console()
    if baseline:
        console.print("floor: the link's endpoint code alone answers the same peer on its own clock (no "
                      "loop process, no plant step, no shared-memory hop): what transport, link code and "
                      "scheduling give on this machine")
    for run in doc["runs"]:
        if "feedback" in run:
            steal = ", ".join(f"{c} {ms:.0f} ms" for c, ms in run["steal_ms"].items())
            console.print(f"{run['rate_hz']:g} Hz feedback: {', '.join(run['feedback'])}; loop lateness p99 "
                          f"{run['loop_lateness_p99_us']:.1f} µs, deadline misses {run['deadline_misses']}"
                          + (f"; hypervisor steal {steal}" if steal else ""))
            floor = run.get("baseline")
            if floor and "error" not in floor:
                steal = ", ".join(f"{c} {ms:.0f} ms" for c, ms in floor["steal_ms"].items())
                console.print(f"  floor run: responder lateness p99 {floor['responder_lateness_p99_us']:.0f} µs"
                              + (f"; hypervisor steal {steal}" if steal else ""))
            if run["lost_frames"]:
                udp = run.get("udp_receive_buffer_overflows")
                console.print(f"  lost frames: {run['hil_frames_not_sent']} not sent by the HIL"
                              + ("" if udp is None else f"; {udp} datagrams dropped by full UDP receive "
                                                        "buffers (the peer's or the link's)"))
    console.print(f"CPU {doc['cpu']}")
    wq = doc["workqueue_cpus"]
    if doc["transport"] in ("serial", "p24-mid", "p24-low") and wq is not None and doc["loop_cpu"] in wq:
        console.print(f"note: kernel workers (unbound workqueues) may run on the loop's CPU {doc['loop_cpu']} "
                      f"(CPUs {wq}); serial round trips then wait for the loop - see systemd/README.md, "
                      "'Tuning the lab PC'")


def print_sweep(doc: dict) -> None:
    sweep, slots = doc["sweep"], doc["threads"]
    where = "a local cluster" if doc["local_cluster"] else doc["scheduler"]
    table = Table(title=f"hil bench sweep: {sweep['runs']} runs x {sweep['duration_s']:g} s of "
                        f"{Path(sweep['base']).name}, {doc['workers']} worker(s) ({slots} thread(s)) of {where}: "
                        f"wall {doc['wall_s']:.2f} s")
    table.add_column("single-run total from")
    for col in ("total (s)", f"/ {slots} = ideal (s)", "wall / ideal", "efficiency"):
        table.add_column(col, justify="right")
    refs = [("results rows' wall_s (ticks)", doc)]
    if doc["serial"] is not None:
        refs.append((f"serial here ({doc['serial']['runs']} runs, first apart)", doc["serial"]))
    if doc["tasks"] is not None:
        refs.append(("whole tasks on the workers", doc["tasks"]))
    for label, r in refs:
        total = r["single_run_total_s"] if r is doc else r["total_s"]
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}"
        table.add_row(label, f"{total:.2f}", f"{r['ideal_wall_s']:.2f}", ratio, f"{r['efficiency']:.0%}")
    console = out_console()
    console.print(table)
    verdict = "met" if doc["meets_goal"] else "missed"
    ratio = "no run ok" if doc["ratio"] is None else f"{doc['ratio']:.2f}x"
    console.print(f"goal (results rows): wall within {doc['goal_ratio']:g}x of the ideal, {verdict} ({ratio})")
    if doc["startup_s"] is not None:
        console.print(f"local cluster start-up {doc['startup_s']:.2f} s, of which the workers' warm-up "
                      f"{doc['warm_up_s']:.2f} s (not in the sweep wall); with it the efficiency is "
                      f"{doc['efficiency_with_startup']:.0%}")
    if doc["serial"] is not None:
        s = doc["serial"]
        console.print(f"serial reference: first run {s['first_run_s']:.2f} s (imports, numba), then "
                      f"{s['per_run_s']:.3f} s per run, of which ticks {s['ticks_wall_s'] or float('nan'):.3f} s")
    for w in (doc["tasks"] or {}).get("per_worker", []):
        later = "-" if w["later_median_s"] is None else f"{w['later_median_s']:.3f} s"
        warm = "unknown" if w["warm_up_s"] is None else (f"{w['warm_up_s']:.2f} s"
                                                         f"{' (in the sweep wall)' if w['warm_up_in_wall'] else ''}")
        console.print(f"worker {w['worker']}: warm-up {warm}, {w['tasks']} tasks, first {w['first_s']:.3f} s, "
                      f"later median {later}")
    steal = "unknown" if doc["steal_ms"] is None else f"{doc['steal_ms']:.0f} ms"
    cpu = doc["cpu_s"]
    machine = "" if cpu["busy"] is None else (f"; the machine's {doc['cpu_count']} CPUs busy {cpu['busy']:.1f} s, "
                                              f"idle {cpu['idle']:.1f} s, other load {cpu['others']:.1f} s")
    console.print(f"during the sweep: CPU time of the workers {cpu['workers']:.1f} s, of this process "
                  f"{cpu['this_process']:.1f} s{machine}; hypervisor steal {steal}")
    console.print(f"CPU: {doc['cpu']} ({doc['cpu_count']} logical), Python {doc['python']}, numba {doc['numba']}, "
                  f"distributed {doc['distributed']}")


def print_gym(doc: dict, rows) -> None:
    """The throughput table of ``hil bench gym``, the per-core speed-ups and the peer's models."""
    table = Table(title=f"hil bench gym: fes_hil/ElbowHold-v0 (action every {doc['action_period_ms']:g} ms) and the "
                        "MyoSuite peer")
    for name in ("environment", "envs", "steps/s", "steps per CPU-s", "cores used", "compiled share",
                 "sim s per wall s", "steal (s)"):
        table.add_column(name, justify="left" if name == "environment" else "right")
    for r in rows:
        sim = r.sim_s_per_wall_s
        share = "-" if r.compiled_s is None else f"{r.compiled_s / r.wall_s:.0%}"
        table.add_row(r.label, str(r.num_envs), f"{r.steps_per_s:,.0f}", f"{r.steps_per_cpu_s:,.0f}",
                      f"{r.cores_used:.2f}", share, "-" if sim is None else f"{sim:.1f}",
                      "-" if r.steal_s is None else f"{r.steal_s:.2f}")
    console = out_console()
    console.print(table)
    bounds = doc["speedup_bound_without_python"]
    for key, value in doc["speedup_per_core"].items():
        bound = f"; with no Python outside its compiled ticks at most {bounds[key]:.2f}x" if key in bounds else ""
        console.print(f"batched / SyncVectorEnv per core, {key}: {value:.2f}x (goal >= 2x, 4x){bound}")
    for m in doc["peer_models"]:
        console.print(f"peer {m['env_id']}: {m['muscles']} muscles, {m['dofs']} DOFs, step {m['timestep_s'] * 1e3:g} ms "
                      f"x {m['frame_skip']} = {m['control_period_s'] * 1e3:g} ms per env step ({m['versions']})")
    if doc["peer_note"]:
        console.print(f"MyoSuite peer: {doc['peer_note']}")
    mach = doc["machine"]
    console.print(f"CPU: {mach['cpu_model']} ({mach['cpus']} logical, {mach['cpus_allowed']} allowed), load "
                  f"{mach['load_1min']:.2f}")
