"""Rules written once and used everywhere: the stimulation map's level -> excitation rule
(:mod:`sim.stimulation_map`, used by the tick and the channel optimisation) and the default recording path of
``hil run`` and ``hil serve``."""
from __future__ import annotations

import os
import re
import time
from types import SimpleNamespace

import numpy as np

import sim.stimulation_map as rule
from hil.cli import run as cli_run
from hil.rt import stimulation
from sim.analysis import static_opt as so
from sim.analysis.channel_opt import ChannelEquilibria


def test_the_rule_is_the_clipped_max_over_channels():
    rng = np.random.default_rng(7)
    gains = rng.uniform(0.0, 1.0, (5, 138)) * (rng.uniform(size=(5, 138)) < 0.4)
    for levels in (rng.uniform(0.0, 1.5, 5), np.zeros(5), np.array([0.0, 2.0, 0.3, -1.0, 1.0])):
        expected = np.clip(np.max(gains * levels[:, None], axis=0), 0.0, 1.0)
        assert np.array_equal(rule.excitations_of_levels(gains, levels, np.empty(138)), expected)


def test_the_tick_and_the_channel_optimisation_use_the_one_rule(model):
    """The tick's stimulation kernels are the rule's own, and the channel optimisation's excitation is the
    rule's, bit for bit, on random gains and levels."""
    assert stimulation.raise_to_level is rule.raise_to_level and stimulation.clip_unit is rule.clip_unit
    rng = np.random.default_rng(3)
    gains = rng.uniform(0.0, 1.0, (4, 138)) * (rng.uniform(size=(4, 138)) < 0.3)
    eqs = ChannelEquilibria(model, gains, so.Posture(0.8, 0.5, 0.0, 0.66, 1.42), np.zeros(10))
    for _ in range(20):
        levels = rng.uniform(0.0, 1.2, 4)
        u, du = eqs.excitation(levels)
        assert np.array_equal(u, rule.excitations_of_levels(gains, levels, np.empty(138)))
        assert du.shape == (138, 4)


def test_hil_run_and_serve_name_their_default_recording_in_one_place(tmp_path):
    cfg = SimpleNamespace(recording=SimpleNamespace(directory=str(tmp_path / "recordings")))
    path = cli_run._default_recording(cfg)
    assert path.parent.is_dir() and path.parent == tmp_path / "recordings"
    assert re.fullmatch(rf"run-\d{{8}}T\d{{6}}Z-{os.getpid()}\.hilrec", path.name)
    source = open(cli_run.__file__).read()
    assert source.count(".hilrec\"") == 1 and source.count("= _default_recording(cfg)") == 2


def test_two_runs_started_in_the_same_second_record_to_two_files(tmp_path, monkeypatch):
    """The recorder never overwrites a file: a second run named like the first would fail to start."""
    cfg = SimpleNamespace(recording=SimpleNamespace(directory=str(tmp_path)))
    one_second = time.gmtime(1_800_000_000)
    monkeypatch.setattr(cli_run.time, "gmtime", lambda: one_second)
    names = set()
    for pid in (4242, 4243):
        monkeypatch.setattr(cli_run.os, "getpid", lambda pid=pid: pid)
        names.add(cli_run._default_recording(cfg).name)
    assert len(names) == 2
