"""The Gymnasium environments (hil.gym): the env checker, seeds, resets in place, the batch against single
environments bit for bit, next-step autoreset, reset options, and a random policy's long run."""
from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import gymnasium as gym
import numba
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from helpers import ROOT
from scipy.spatial.transform import Rotation

import hil.gym
from hil.gym.env import FesArmEnv
from hil.gym.tasks import RewardWeights
from hil.gym.vector import FesArmVectorEnv

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::numba.NumbaTypeSafetyWarning")
SHORT = {"duration_s": 0.2}


def rollout(env, seed, actions, options=None):
    """Observations and rewards of ``actions`` from ``reset(seed)`` (bytes: compared bit for bit)."""
    obs, _ = env.reset(seed=seed, options=options)
    seen, rewards = [obs.tobytes()], []
    for a in actions:
        obs, r, term, trunc, _ = env.step(a)
        seen.append(obs.tobytes())
        rewards.append(r)
        if term or trunc:
            break
    return seen, np.array(rewards)


def random_actions(space, n, seed=0):
    space.seed(seed)
    return [space.sample() for _ in range(n)]


UNBOUNDED = "A Box observation space m"
"""The checker's one warning that applies: the observation space is unbounded (angles, rates, forces), on purpose."""


@pytest.mark.parametrize("plant", ["das3", "mtg"])
@pytest.mark.parametrize("env_id", hil.gym.environment_ids())
def test_every_environment_passes_the_env_checker_on_both_plants(env_id, plant):
    """Without a warning but the unbounded space's: the checker only warns when an observation is not in the space
    (a NaN of a quantity the plant does not model) or the seeding is wrong."""
    env = gym.make(env_id, plant=plant)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env.unwrapped)
    assert [str(w.message) for w in caught if UNBOUNDED not in str(w.message)] == []
    assert env.unwrapped.observation_space.shape[0] == len(env.unwrapped.observation_labels)
    env.action_space.seed(0)
    observations = [env.reset(seed=0)[0]] + [env.step(env.action_space.sample())[0] for _ in range(20)]
    assert np.isfinite(observations).all()


def test_a_seed_reproduces_the_trajectory_and_another_seed_does_not():
    env_a, env_b = FesArmEnv("ElbowHold", **SHORT), FesArmEnv("ElbowHold", **SHORT)
    actions = random_actions(env_a.action_space, 10)
    first, r1 = rollout(env_a, 7, actions)
    again, r2 = rollout(env_b, 7, actions)
    other, _ = rollout(env_b, 8, actions)
    assert first == again and np.array_equal(r1, r2)
    assert first[0] != other[0]      # another target


def test_a_reset_in_place_equals_a_fresh_environment():
    used, fresh = FesArmEnv("ElbowHold", **SHORT), FesArmEnv("ElbowHold", **SHORT)
    actions = random_actions(used.action_space, 10, seed=1)
    rollout(used, 3, [np.ones(2, np.float32)] * 10)        # an episode that changes every state
    (seen_used, r_used), (seen_fresh, r_fresh) = rollout(used, 5, actions), rollout(fresh, 5, actions)
    assert seen_used == seen_fresh and r_used.tobytes() == r_fresh.tobytes()


def snapshot_state(snapshot):
    """What a snapshot saw: every array's bytes, and each object's scalars and empty dicts, in walk order."""
    arrays = [saved.tobytes() for _, saved in snapshot.arrays]
    scalars = [(type(obj).__name__, values, empty) for obj, values, empty in snapshot.scalars.values()]
    return arrays, scalars


def test_a_restored_engine_is_the_engine_as_built_in_every_array_and_attribute():
    from hil.gym.snapshot import EngineSnapshot
    env = FesArmEnv("ElbowHold", **SHORT)
    engine = env.episodes.arms.arms[0].engine
    engine.strided_probe = np.zeros((4, 4))[:, ::2]          # an array that is not contiguous
    snapshot = EngineSnapshot(engine)
    built = snapshot_state(snapshot)
    rollout(env, 3, [np.ones(2, np.float32)] * 10)        # an episode that changes every state
    engine.strided_probe[:] = 1.0
    engine.driver_lost(0, 0)                                # fills an empty dict
    changed = snapshot_state(EngineSnapshot(engine))
    assert changed[0] != built[0] and changed[1] != built[1]
    snapshot.restore()
    assert snapshot_state(EngineSnapshot(engine)) == built


@pytest.mark.parametrize("threads", [1, 2])
def test_the_batch_equals_single_environments_bit_for_bit(threads):
    n, steps = 3, 14       # 10 steps per episode: the batch autoresets within the run
    batch = FesArmVectorEnv("ElbowHold", num_envs=n, threads=threads, **SHORT)
    singles = [FesArmEnv("ElbowHold", **SHORT) for _ in range(n)]
    rng = np.random.default_rng(2)
    actions = rng.uniform(0, 1, (steps, n, 2)).astype(np.float32)
    obs, _ = batch.reset(seed=10)
    batch_obs, batch_rewards = [obs], []
    for t in range(steps):
        obs, r, term, trunc, _ = batch.step(actions[t])
        batch_obs.append(obs)
        batch_rewards.append(r)
    if threads > 1:
        assert numba.get_num_threads() == min(threads, numba.config.NUMBA_NUM_THREADS)     # the batch's threads
    for i, env in enumerate(singles):
        obs, _ = env.reset(seed=10 + i)
        assert obs.tobytes() == batch_obs[0][i].tobytes()
        reset_next = False
        for t in range(steps):
            if reset_next:        # next-step autoreset: the batch ignored this action and reset the arm
                obs, _ = env.reset()
                reward, reset_next = 0.0, False
            else:
                obs, reward, term, trunc, _ = env.step(actions[t, i])
                reset_next = term or trunc
            assert obs.tobytes() == batch_obs[t + 1][i].tobytes(), (i, t)
            assert reward == batch_rewards[t][i]


def test_a_one_thread_batch_starts_no_thread_pool():
    """numba's pool costs a launch per call, and GNU OpenMP's does not survive a fork (hil.rt.plants): a process
    stepping batches on one thread must not start it."""
    script = ("import numba, numpy as np\n"
              "from hil.gym.vector import FesArmVectorEnv\n"
              "batch = FesArmVectorEnv('ElbowHold', num_envs=2, plant='mtg', duration_s=0.2)\n"
              "batch.reset(seed=0)\n"
              "batch.step(np.zeros((2, 2)))\n"
              "try:\n    print(numba.threading_layer())\nexcept ValueError:\n    print('no pool')\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.stdout.split() == ["no", "pool"], done.stdout + done.stderr


def test_gymnasiums_forked_workers_step_the_arms_as_the_single_environment_does():
    """AsyncVectorEnv steps an environment in this process, then forks its workers: they must step and give the
    single environment's trajectory. (A one-thread batch starts no numba thread pool; GNU OpenMP's, numba's layer
    here, aborts a forked child's first parallel call.)"""
    FesArmVectorEnv("ElbowHold", num_envs=2, plant="mtg", **SHORT).step(np.zeros((2, 2)))
    workers = gym.make_vec("fes_hil/ElbowHold-v0", num_envs=2, vectorization_mode="async",
                           vector_kwargs={"context": "fork"}, plant="mtg", **SHORT)
    try:
        actions = random_actions(workers.single_action_space, 5)
        obs, _ = workers.reset(seed=[3, 4])
        forked = [obs[1].tobytes()] + [workers.step(np.stack([a, a]))[0][1].tobytes() for a in actions]
    finally:
        workers.close(terminate=True)
    assert forked == rollout(FesArmEnv("ElbowHold", plant="mtg", **SHORT), 4, actions)[0]


@pytest.mark.parametrize("plant", ["das3", "mtg"])
def test_render_draws_the_plants_posture(plant):
    """The hand is drawn where the model's kinematics put it, in both views, before and after the elbow moved."""
    from hil.gym.render import BONES, pixel
    from sim.das3.kinematics import LANDMARKS, landmarks

    env = gym.make("fes_hil/ElbowHold-v0", plant=plant, render_mode="rgb_array", duration_s=1.0)
    arm, das3 = env.unwrapped.episodes.arms.arms[0], env.unwrapped.episodes.arms.segment_model(0)
    hand_rgb = [rgb for _, end, rgb in BONES if end == "HAND"][0]

    def hand_pixels():
        hand = landmarks(das3.arrays, arm.engine.plant.outputs.q[None, :])[0, LANDMARKS.index("HAND")]
        return [tuple(np.rint(pixel(hand, view)).astype(int)) for view in (0, 1)]

    env.reset(seed=0)
    before, at_rest = env.render(), hand_pixels()
    for _ in range(30):
        env.step(np.array([1.0, 0.0], np.float32))                   # biceps on: the elbow flexes
    after, flexed = env.render(), hand_pixels()
    assert before.shape == (240, 480, 3) and before.dtype == np.uint8
    assert at_rest != flexed and (before != after).any()
    for picture, pixels in ((before, at_rest), (after, flexed)):
        assert all(picture[r, c].tolist() == list(hand_rgb) for r, c in pixels), pixels
    assert env.metadata["render_fps"] == 50.0
    assert FesArmEnv("ElbowHold", plant=plant).render() is None


def test_the_views_draw_up_upwards_and_lateral_and_forward_to_the_right():
    """Thorax frame (x lateral, y up, z posterior): the front view's right is lateral, the side view's forward."""
    from hil.gym.render import PANEL_PX, pixel
    up, down = np.array([0.0, 0.5, 0.0]), np.array([0.0, -0.5, 0.0])
    lateral, medial = np.array([0.5, 0.0, 0.0]), np.array([-0.5, 0.0, 0.0])
    forward, backward = np.array([0.0, 0.0, -0.5]), np.array([0.0, 0.0, 0.5])
    for view in (0, 1):
        assert pixel(up, view)[0] < pixel(down, view)[0]
        assert view * PANEL_PX <= pixel(up, view)[1] < (view + 1) * PANEL_PX
    assert pixel(lateral, 0)[1] > pixel(medial, 0)[1] and pixel(forward, 1)[1] > pixel(backward, 1)[1]


def test_the_vector_environments_draw_every_arm():
    batch = FesArmVectorEnv("ElbowHold", num_envs=2, plant="mtg", render_mode="rgb_array", **SHORT)
    batch.reset(seed=[1, 2])
    batch.step(np.array([[1.0, 0.0], [0.0, 1.0]], np.float32))
    pictures = batch.render()
    assert len(pictures) == 2 and (pictures[0] != pictures[1]).any()
    assert all(np.array_equal(p, batch.episodes.picture(i)) for i, p in enumerate(pictures))
    from hil.gym.sb3 import FesArmSb3VecEnv
    venv = FesArmSb3VecEnv("ElbowHold", num_envs=2, plant="mtg", render_mode="rgb_array", **SHORT)
    venv.reset()
    assert [p.shape for p in venv.get_images()] == [(240, 480, 3)] * 2 and venv.render().ndim == 3


def test_make_vec_uses_the_batched_entry_point():
    envs = gym.make_vec("fes_hil/ElbowHold-v0", num_envs=2, vectorization_mode="vector_entry_point", **SHORT)
    assert isinstance(envs.unwrapped, FesArmVectorEnv)
    obs, _ = envs.reset(seed=0)
    assert obs.shape == (2, 3)


def test_reset_options_set_target_load_and_patient():
    env = FesArmEnv("ElbowHold", **SHORT)
    obs, info = env.reset(seed=0, options={"target_deg": 75.0, "hand_load_kg": 0.4})
    assert obs[-1] == np.float32(np.radians(75.0))
    loads = env.episodes.arms.arms[0].engine.plant.loads
    assert loads[list(env.episodes.arms.arms[0].model.load_names).index("hand_force_y")] == pytest.approx(-0.4 * 9.80665)
    able = env.episodes.arms.arms[0].engine
    env.reset(seed=0, options={"patient": "c5-tetraplegia"})
    assert env.episodes.arms.arms[0].engine is not able
    with pytest.raises(ValueError, match="unknown reset option"):
        env.reset(options={"targte": 1.0})


def test_on_the_mtg_arm_a_patients_episodes_differ_from_able_bodied_and_the_batch_equals_single_envs(tmp_path):
    """reset(options={"patient": ...}) builds the MTG arm scaled for the patient (sim.mtg.patient)."""
    c5 = {"patient": "c5-tetraplegia"}
    actions = random_actions(gym.spaces.Box(0.0, 1.0, (2,), np.float32), 8, seed=4)
    single = FesArmEnv("ElbowHold", plant="mtg", **SHORT)
    (able_obs, _), (c5_obs, _) = rollout(single, 7, actions), rollout(single, 7, actions, c5)
    assert able_obs[-1] != c5_obs[-1]       # (the start too: the weaker passive torques rest the arm elsewhere)
    assert single.episodes.arms.arms[0].model.actuators.strength.min() < 0.7
    batch = FesArmVectorEnv("ElbowHold", num_envs=2, plant="mtg", **SHORT)
    obs, _ = batch.reset(seed=[7, 8], options=c5)
    seen = [obs[0].tobytes()]
    for a in actions:
        obs, _, term, trunc, _ = batch.step(np.stack([a, a]))
        seen.append(obs[0].tobytes())
    assert seen == c5_obs[:len(seen)]
    with pytest.raises(ValueError, match="unknown preset 'nobody'"):      # one line, the env unchanged
        single.reset(options={"patient": "nobody"})
    assert rollout(single, 7, actions, c5)[0] == c5_obs
    for name, table in (("tight", "[patient.groups.brachialis]\ncontracture_lceopt = 0.2"),
                        ("small", "[patient.size]\nheight_m = 1.6\nbody_mass_kg = 60")):
        (tmp_path / f"{name}.toml").write_text(f'[patient]\nname = "{name}"\n{table}\n')
        obs = rollout(single, 7, actions, {"patient": str(tmp_path / f"{name}.toml")})[0]
        assert obs[0] != able_obs[0], name           # a contracted or smaller arm rests elsewhere


BAD_RESETS = [
    ({"target": [1.0, 2.0]}, r"target: 1 number\(s\) \(rad\) within \[-3.14159, 3.14159\], not \[1.0, 2.0\]"),
    ({"target": float("nan")}, "target: 1 number"),
    ({"target": "x"}, "target: 1 number"),
    ({"target": 4.0}, "target: 1 number"),
    ({"target_deg": 1e300}, r"target_deg: an angle in degrees within \[-180, 180\], not 1e\+300"),
    ({"target_deg": "ninety"}, "target_deg: an angle in degrees"),
    ({"hand_load_kg": -5}, "hand_load_kg: kg from 0 to 20, not -5"),
    ({"hand_load_kg": float("nan")}, "hand_load_kg: kg from 0 to 20"),
    ({"hand_load_kg": 1e9}, "hand_load_kg: kg from 0 to 20"),
    ({"patient": 3}, "patient: a preset name or a patient file, not int"),
    ([("target", 1.0)], "reset options: a dict, not list"),
    ({"reference": 5}, r"reference: a motion file's path \(.mot, .sto, .trc or .c3d\), not int"),
    ({"reference": "/nonexistent/elbow.mot"}, "/nonexistent/elbow.mot: cannot read"),    # read before the reset
]


@pytest.mark.parametrize("options, message", BAD_RESETS)
def test_bad_reset_options_are_refused_in_one_line_and_leave_the_environment_as_it_was(options, message):
    env, fresh = FesArmEnv("ElbowHold", **SHORT), FesArmEnv("ElbowHold", **SHORT)
    env.reset(seed=1)
    with pytest.raises(ValueError, match=message) as refused:
        env.reset(seed=0, options=options)
    assert "\n" not in str(refused.value)
    actions = random_actions(env.action_space, 5)
    fresh.reset(seed=1)
    assert [env.step(a)[0].tobytes() for a in actions] == [fresh.step(a)[0].tobytes() for a in actions]


def test_a_refused_patient_leaves_the_arms_generator_as_it_was():
    """The patient is built at the reset itself (after the episode's draws): refusing it must undo them."""
    env, twin = (FesArmEnv("ElbowHold", plant="mtg", **SHORT) for _ in range(2))
    env.reset(seed=7)
    twin.reset(seed=7)
    with pytest.raises(ValueError, match="unknown preset 'nobody'"):
        env.reset(options={"patient": "nobody"})
    actions = random_actions(env.action_space, 4)
    assert rollout(env, None, actions)[0] == rollout(twin, None, actions)[0]


@pytest.mark.parametrize("seed, message", [
    ([1, 2], r"seed: a whole number >= 0, or a list of 3 \(one per environment\), not 2 seeds"),
    ([1, 2, 3, 4], "not 4 seeds"),
    ([1, "x", 3], r"seed\[1\]: a whole number >= 0 or None, not 'x'"),
    ([1, 2, -3], r"seed\[2\]: a whole number >= 0 or None, not -3"),
    (1.5, "not 1.5"),
    (True, "not True"),
])
def test_bad_vector_seeds_are_refused_in_one_line_before_any_arm_is_reset(seed, message):
    batch, fresh = (FesArmVectorEnv("ElbowHold", num_envs=3, plant="mtg", **SHORT) for _ in range(2))
    batch.reset(seed=[5, 6, 7])
    with pytest.raises(ValueError, match=message) as refused:
        batch.reset(seed=seed)
    assert "\n" not in str(refused.value)
    fresh.reset(seed=[5, 6, 7])
    actions = [np.stack([a] * 3) for a in random_actions(gym.spaces.Box(0.0, 1.0, (2,), np.float32), 4)]
    assert [batch.step(a)[0].tobytes() for a in actions] == [fresh.step(a)[0].tobytes() for a in actions]


def test_a_target_is_checked_against_its_tasks_limits():
    flexion = FesArmEnv("ForwardFlexion", **SHORT)
    with pytest.raises(ValueError, match=r"target: 2 number\(s\) \(rad, s\) within .*\[0.02, 60\]"):
        flexion.reset(options={"target": [1.0, 0.0]})        # a rise in no time
    flexion.reset(options={"target": [1.0, 1.5]})
    assert flexion.episodes.params[0].tolist() == [1.0, 1.5]
    reach = FesArmEnv("Reach", **SHORT)
    with pytest.raises(ValueError, match=r"target: 3 number\(s\) \(m, a point in the thorax frame\)"):
        reach.reset(options={"target": [0.1, 0.2, 9.0]})


BAD_ARGUMENTS = [
    ({"duration_s": float("inf")}, "duration_s: seconds, more than 0 and at most 3600, not inf"),
    ({"render_mode": "human"}, "render_mode: None or 'rgb_array', not 'human'"),
    ({"plant": "mtg", "observe": ("q[ELx]", "gh_stability")}, r"observe: gh_stability: not modelled by this plant"),
    ({"duration_s": 0.0}, "duration_s: seconds"),
    ({"action_period_s": 1e9}, "action_period_s: seconds, more than 0 and at most 10"),
    ({"action_period_s": float("nan")}, "action_period_s: seconds"),
    ({"hand_load_kg": (1.0, 0.5)}, r"hand_load_kg: \(low, high\) with 0 <= low <= high <= 20 kg"),
    ({"hand_load_kg": (0.0, 50.0)}, "hand_load_kg: "),
    ({"num_envs": 0}, "num_envs: a whole number from 1 to 1024, not 0"),
    ({"num_envs": 10**7}, "num_envs: a whole number from 1 to 1024, not 10000000"),
    ({"num_envs": 2.5}, "num_envs: a whole number"),
    ({"threads": 0}, "threads: a whole number from 1 to 1024, not 0"),
    ({"threads": "2"}, "threads: a whole number"),
    ({"observe": (3,)}, r"observe: frame item names such as \('q\[ELx\]', 'qdot\[ELx\]'\), not \(3,\)"),
    ({"weights": RewardWeights(error_scale=0.0)}, "weights: a RewardWeights of finite numbers with error_scale > 0"),
    ({"weights": RewardWeights(effort=float("nan"))}, "weights: a RewardWeights"),
    ({"weights": 3}, "weights: a RewardWeights"),
    ({"task": "Nope"}, r"unknown task 'Nope' \(one of ElbowHold, Reach, ForwardFlexion\)"),
]


@pytest.mark.parametrize("kwargs, message", BAD_ARGUMENTS)
def test_bad_environment_arguments_are_refused_in_one_line_before_anything_is_built(kwargs, message, monkeypatch):
    import hil.gym.arm_batch as arm_batch
    monkeypatch.setattr(arm_batch, "Arm", None)             # building an arm would fail with a TypeError
    kwargs = {"task": "ElbowHold", "num_envs": 2, **kwargs}
    with pytest.raises(ValueError, match=message) as refused:
        FesArmVectorEnv(**kwargs)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("kwargs, message", [
    ({"pulse_width_us": 1e9}, r"pulse_width_us: more than 0 and at most 500 \(the channels' limit\), not 1000000000.0"),
    ({"pulse_width_us": float("nan")}, "pulse_width_us: more than 0"),
    ({"frequency_hz": -5.0}, r"frequency_hz: from 10 to 100 Hz \(the channels' limits\), not -5.0"),
])
def test_a_fixed_pulse_outside_the_channels_limits_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):       # every command of such an environment would be rejected
        FesArmEnv("ElbowHold", **SHORT, **kwargs)
    FesArmEnv("ElbowHold", **SHORT, action_kind="pw_amp_freq", **kwargs)     # its actions carry their own


def test_actions_of_the_wrong_shape_or_not_numbers_are_refused_in_one_line():
    env, batch = FesArmEnv("ElbowHold", **SHORT), FesArmVectorEnv("ElbowHold", num_envs=3, **SHORT)
    env.reset(seed=0)
    batch.reset(seed=0)
    for step, bad, message in ((env.step, np.zeros(5), r"action: numbers of shape \(2,\), not shape \(5,\)"),
                               (env.step, "abc", r"action: numbers of shape \(2,\), not non-numbers"),
                               (batch.step, np.zeros((2, 2)), r"action: numbers of shape \(3, 2\), not shape \(2, 2\)"),
                               (batch.step, [["a", 1.0]] * 3, "not non-numbers")):
        with pytest.raises(ValueError, match=message):
            step(bad)
    assert int(env.episodes.steps[0]) == 0 and batch.episodes.steps.tolist() == [0, 0, 0]     # nothing stepped


def test_level_actions_reach_the_channels_through_the_limits():
    env = FesArmEnv("ElbowHold", **SHORT)
    env.reset(seed=0)
    env.step(np.array([0.5, 2.0], np.float32))      # triceps asked beyond its limit: the channel's policy rules
    engine = env.episodes.arms.arms[0].engine
    biceps, triceps = env.episodes.arms.actions.channels
    assert engine.stim.channels[triceps].limit_policy == "reject"
    assert engine.applied[biceps, 1] == pytest.approx(0.5 * engine.stim.channels[biceps].max_amplitude_ma)
    assert engine.applied[triceps, 1] == 0.0
    assert engine.rejected == {(0, "amplitude_limit"): 1}


def test_hostile_actions_in_a_batch_are_rejected_per_arm_and_the_others_latch():
    """NaN, infinite, huge and negative levels (float32 extremes included) reach the engine command by command,
    which rejects them and counts why; nothing non-finite or beyond a limit is applied, no arm stops, and an
    arm with a good action beside them latches it as usual."""
    batch = FesArmVectorEnv("ElbowHold", num_envs=5, plant="mtg", **SHORT)
    batch.reset(seed=50)
    hostile = np.array([[np.nan, 0.5], [np.inf, -np.inf], [-3.4e38, 3.4e38], [0.3, 0.4], [1.0, -1e-30]], np.float32)
    _, _, term, _, _ = batch.step(hostile)
    arms = batch.episodes.arms
    biceps, triceps = arms.actions.channels
    assert not term.any()
    for i, arm in enumerate(arms.arms):
        applied = arm.engine.applied[[biceps, triceps]]
        assert np.isfinite(applied).all(), i
        assert (applied[:, 1] >= 0.0).all() and (applied[:, 1] <= arms._max_amplitude_ma).all(), i
    rejected = [arm.engine.rejected for arm in arms.arms]
    assert rejected[0] and rejected[1] and rejected[2] and rejected[4] and not rejected[3]
    assert all(reason in {"non_finite", "amplitude_limit"} for r in rejected for (_, reason) in r), rejected
    good = arms.arms[3].engine
    assert good.applied[biceps, 1] == pytest.approx(0.3 * arms._max_amplitude_ma[0])
    assert good.counters.received_by_driver() == {0: 2}


def test_accepted_actions_are_counted_feed_the_watchdog_and_give_the_effort():
    """Actions within the limits (latched at once): every channel command counted as received from the policy,
    the watchdog fed at the step's tick, and the effort the mean squared relative amplitude applied."""
    env = FesArmEnv("ElbowHold", **SHORT)
    env.reset(seed=0)
    engine = env.episodes.arms.arms[0].engine
    levels = [np.array([0.5, 0.25], np.float32), np.array([0.1, 0.8], np.float32), np.array([0.0, 0.3], np.float32)]
    for k, level in enumerate(levels):
        tick = int(env.episodes.arms.ticks[0])
        _, _, _, _, info = env.step(level)
        assert engine.counters.received_by_driver() == {0: 2 * (k + 1)}
        assert engine.watchdog.cells[0] == tick    # WD_LAST_VALID: the tick the commands arrived at
        assert info["effort"] == pytest.approx(float(np.mean(level.astype(np.float64) ** 2)), rel=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("plant", ["das3", "mtg"])
@pytest.mark.parametrize("env_id", hil.gym.environment_ids())
def test_a_random_policy_runs_ten_thousand_steps(env_id, plant):
    env = gym.make(env_id, plant=plant)
    env.action_space.seed(0)
    env.reset(seed=0)
    episodes = 0
    for _ in range(10_000):
        obs, reward, term, trunc, info = env.step(env.action_space.sample())
        assert np.isfinite(reward) and np.all(np.isfinite(obs))
        if term or trunc:
            episodes += 1
            env.reset()
    assert episodes >= 10_000 // env.unwrapped.episodes.max_steps - 1


def test_stable_baselines3_trains_on_the_batched_arms():
    """SB3's own vec-env checks and a short PPO run on the adapter; episodes end and reset inside SB3's step."""
    from stable_baselines3 import PPO

    from hil.gym.sb3 import FesArmSb3VecEnv

    venv = FesArmSb3VecEnv("ElbowHold", num_envs=2, seed=0, **SHORT)
    model = PPO("MlpPolicy", venv, n_steps=16, batch_size=16, n_epochs=1, seed=0, device="cpu")
    model.learn(total_timesteps=64)
    obs = venv.reset()
    ended = []
    for _ in range(12):
        obs, rewards, dones, infos = venv.step(np.stack([venv.action_space.sample()] * 2))
        ended += [info for info, done in zip(infos, dones) if done]
    assert ended and all("terminal_observation" in info and info["TimeLimit.truncated"] for info in ended)
    assert all(info["episode"]["l"] == venv.episodes.max_steps for info in ended)
    assert obs.shape == (2, 3) and rewards.dtype == np.float32
    with pytest.raises(ValueError, match=r"action: numbers of shape \(2, 2\), not shape \(3, 2\)"):
        venv.step_async(np.zeros((3, 2)))


def test_stable_baselines3s_wrappers_take_the_batch_without_a_warning():
    from stable_baselines3.common.vec_env import VecMonitor, VecNormalize

    from hil.gym.sb3 import FesArmSb3VecEnv

    with warnings.catch_warnings():
        warnings.simplefilter("error")                  # this module ignores UserWarnings elsewhere
        venv = VecNormalize(VecMonitor(FesArmSb3VecEnv("ElbowHold", num_envs=2, plant="mtg", **SHORT)))
        venv.reset()
        obs, rewards, dones, infos = venv.step(np.zeros((2, 2)))
    assert obs.shape == (2, 3) and venv.render_mode is None


def test_stable_baselines3s_seed_and_options_reach_the_next_reset_once():
    """PPO(..., seed=s) seeds its VecEnv through ``seed()`` and set_options() gives the next reset's options;
    both are used by the next reset only, as in SB3's own vector environments."""
    from stable_baselines3 import PPO

    from hil.gym.sb3 import FesArmSb3VecEnv

    a, b, c = (FesArmSb3VecEnv("ElbowHold", num_envs=2, plant="mtg", **SHORT) for _ in range(3))
    for venv in (a, b):
        PPO("MlpPolicy", venv, n_steps=16, batch_size=16, seed=3, device="cpu")
    c.seed(4)
    drawn = [(v.reset(), v.episodes.params.copy())[1] for v in (a, b, c)]
    assert np.array_equal(drawn[0], drawn[1]) and not np.array_equal(drawn[0], drawn[2])
    assert drawn[0][0, 0] != drawn[0][1, 0]                     # each arm its own seed
    a.reset()
    assert not np.array_equal(a.episodes.params, drawn[0])      # the seed was used once
    a.set_options({"target_deg": 60.0})
    a.reset()
    assert np.all(a.episodes.params[:, 0] == np.radians(60.0))
    a.reset()
    assert not np.any(a.episodes.params[:, 0] == np.radians(60.0))
    kept = a.episodes.params.copy()
    for options, message in (([{}, {"target_deg": 1e9}], "target_deg: an angle in degrees"),
                             ([{}, {}, {}], "set_options: one dict for every arm or a list of 2, not 3 dicts")):
        a.set_options(options)
        with pytest.raises(ValueError, match=message):
            a.reset()
        assert np.array_equal(a.episodes.params, kept)          # no arm reset


def write_mot(path, time_s, columns: dict) -> None:
    """An OpenSim Storage (.mot) file in radians."""
    names = ["time", *columns]
    rows = np.column_stack([time_s, *columns.values()])
    header = (f"reference\nversion=1\nnRows={rows.shape[0]}\nnColumns={rows.shape[1]}\ninDegrees=no\nendheader\n"
              + "\t".join(names) + "\n")
    path.write_text(header + "\n".join("\t".join(f"{v:.17g}" for v in row) for row in rows) + "\n")


def test_a_recorded_motion_is_the_elbow_target(tmp_path):
    t = np.linspace(0.0, 0.5, 51)
    elbow = np.radians(60.0) + np.radians(30.0) * np.sin(2 * np.pi * t)
    write_mot(tmp_path / "ref.mot", t, {"EL_x": elbow})
    env = FesArmEnv("ElbowHold", **SHORT)
    obs, _ = env.reset(seed=0, options={"reference": str(tmp_path / "ref.mot")})
    targets = [obs[-1]]
    for _ in range(9):
        obs, *_ = env.step(np.zeros(2, np.float32))
        targets.append(obs[-1])
    step_times = np.arange(10) * env.dt
    assert np.allclose(targets, np.interp(step_times, t, elbow), atol=1e-6)
    with pytest.raises(ValueError, match="no column .SC_y. .or .SCy.. for DOF SCy"):   # the hand needs all 11
        FesArmEnv("Reach", **SHORT).reset(options={"reference": str(tmp_path / "ref.mot")})


def _plant_hand(model, q):
    """The DAS3 plant's own hand-position output in posture q."""
    from sim.das3.kernels.outputs import compute_outputs
    from sim.das3.kernels.step import evaluate, new_plant_work

    W = new_plant_work(model.arrays)
    x = np.array(model.equilibrium_state)
    x[:11] = q
    evaluate(model.arrays, x, np.zeros(x.size), x[160:].copy(), np.zeros(10), W)
    compute_outputs(model.arrays, W)
    return W.out.hand_position.copy()


@pytest.mark.parametrize("plant", ["das3", "mtg"])
def test_recorded_coordinates_are_the_reach_hand_target(tmp_path, plant):
    """Reach follows the hand position of recorded DAS3 coordinates, as the DAS3 plant computes it in each posture
    (on the MTG arm too: its hand is in the same thorax frame)."""
    from hil.patients import load_patient
    from sim.das3.config import ModelConfig
    from sim.das3.model import load_model
    from sim.das3.release import opensim_names
    from sim.patient import apply_patient

    model = load_model()
    t = np.linspace(0.0, 0.5, 51)
    q = np.tile(model.equilibrium_state[:11], (t.size, 1))
    q[:, 9] += 0.6 * np.sin(2 * np.pi * t)                     # elbow
    q[:, 7] += 0.3 * t                                         # GH elevation
    coordinate = opensim_names()[0]
    write_mot(tmp_path / "reach.mot", t, {coordinate[n]: q[:, j] for j, n in enumerate(model.dof_names)})
    env = FesArmEnv("Reach", plant=plant, **SHORT)
    env.reset(seed=0, options={"reference": str(tmp_path / "reach.mot")})
    targets = [env.episodes.targets[0].copy()]
    for _ in range(9):
        env.step(np.zeros(env.action_space.shape, np.float32))
        targets.append(env.episodes.targets[0].copy())
    for k, target in enumerate(targets):
        step_q = np.array([np.interp(k * env.dt, t, q[:, j]) for j in range(11)])
        np.testing.assert_allclose(target, _plant_hand(model, step_q), rtol=0, atol=1e-12)
    small = tmp_path / "small.toml"                             # a smaller patient: the hand on its own segments
    small.write_text('[patient]\nname = "small"\n[patient.size]\nheight_m = 1.6\nbody_mass_kg = 60.0\n')
    env.reset(seed=0, options={"reference": str(tmp_path / "reach.mot"), "patient": str(small)})
    sized = load_model(apply_patient(ModelConfig(), load_patient(str(small))))
    np.testing.assert_allclose(env.episodes.targets[0], _plant_hand(sized, q[0]), rtol=0, atol=1e-12)
    assert np.linalg.norm(env.episodes.targets[0] - targets[0]) > 0.02


def test_an_environment_step_is_the_service_tick_with_the_same_commands():
    """The arm's frames equal a tick engine of the same config driven command by command (TickEngine.channel,
    as a controller's driver does) every 5 ticks: the environment adds nothing to the service's tick."""
    from hil.config import load_service_config
    from hil.gym.tasks import TASKS
    from hil.service.build import build_tick_engine

    env = FesArmEnv("ElbowHold")
    env.reset(seed=0, options={"hand_load_kg": 0.0})
    _, engine = build_tick_engine(load_service_config(TASKS["ElbowHold"].config_file("das3")))
    engine.warmup()
    layout = env.episodes.arms.actions
    actions = random_actions(env.action_space, 8, seed=4)
    for step, action in enumerate(actions):
        env.step(action)
        for k in range(5):
            engine.begin(5 * step + k)
            if k == 0:
                for c, pw, amp, freq in layout.commands(np.asarray(action, float)):
                    assert engine.channel(0, 0, c, pw, amp, freq, 0)
            frame = engine.step().frame
        assert frame.tobytes() == env.episodes.arms.frames[:1].tobytes(), step


def mtg_config(tmp_path, text: str) -> str:
    """The MTG ElbowHold config (configs/gym) with ``text`` added, written under ``tmp_path``."""
    from hil.gym.tasks import CONFIG_DIR
    path = tmp_path / "mtg.toml"
    path.write_text(f'include = ["{CONFIG_DIR / "elbow-hold-mtg.toml"}"]\n{text}')
    return str(path)


ENDING = {"plant": "mtg", "duration_s": 1.0}


def test_a_safety_stop_ends_that_arms_episode_only_and_the_batch_equals_single_environments(tmp_path):
    """A range-of-motion stop (the triceps at full level extends the elbow past its range) terminates the arm
    that reached it, says why, and the next step resets it; the other arms run on, and every arm's observations
    and rewards equal a single environment's through the stop and the reset."""
    cfg = mtg_config(tmp_path, '[safety]\nrom_action = "stop"\n')
    n, steps = 3, 12
    levels = np.array([[1.0, 0.0], [0.0, 0.0], [0.0, 1.0]], np.float32)     # biceps, none, triceps
    batch = FesArmVectorEnv("ElbowHold", num_envs=n, config=cfg, **ENDING)
    seen = [batch.reset(seed=30)[0]]
    ends, rewards = [], []
    for t in range(steps):
        obs, r, term, trunc, info = batch.step(levels)
        seen.append(obs)
        rewards.append(r)
        ends.append((term.copy(), list(info["termination"])))
    stop = next(t for t, (term, _) in enumerate(ends) if term.any())
    assert ends[stop][0].tolist() == [False, False, True]
    assert ends[stop][1] == ["running", "running", "safety_stop"]
    assert not any(term.any() for term, _ in ends[:stop]) and rewards[stop + 1][2] == 0.0
    assert ends[stop + 1][1][2] == "running" and not ends[stop + 1][0].any()     # reset by the next step
    for i in range(n):
        env = FesArmEnv("ElbowHold", config=cfg, **ENDING)
        obs, _ = env.reset(seed=30 + i)
        assert obs.tobytes() == seen[0][i].tobytes()
        reset_next = False
        for t in range(steps):
            if reset_next:
                obs, reward, reset_next = env.reset()[0], 0.0, False
            else:
                obs, reward, term, trunc, info = env.step(levels[i])
                reset_next = term or trunc
                assert info["termination"] == ends[t][1][i]
                assert ("ELx" in info["detail"]) == (info["termination"] == "safety_stop")    # the operator's why
            assert obs.tobytes() == seen[t + 1][i].tobytes(), (i, t)
            assert reward == rewards[t][i]


def test_every_driven_channel_fatigued_ends_the_episode_as_fibre_collapse(tmp_path):
    """With fatigue 100 times faster than published, an arm whose two channels are both at full level reaches
    the fibre collapse; an arm at rest, and an arm driving one channel only, do not."""
    cfg = mtg_config(tmp_path, '[stimulation]\nfatigue = "ding2003"\nfatigue_rate_scale = 100.0\n')
    batch = FesArmVectorEnv("ElbowHold", num_envs=3, config=cfg, **ENDING)
    batch.reset(seed=40)
    levels = np.array([[1.0, 1.0], [0.0, 0.0], [1.0, 0.0]], np.float32)
    for t in range(49):
        _, _, term, trunc, info = batch.step(levels)
        if term.any():
            break
    assert term.tolist() == [True, False, False] and not trunc.any()
    assert list(info["termination"]) == ["fibre_collapse", "running", "running"]
    fitness = batch.episodes.arms.records["fitness"][:, list(batch.episodes.arms.actions.channels)]
    assert fitness[0].max() < 0.05 <= fitness[2].max() and fitness[2].min() < 0.05 and fitness[1].min() == 1.0


def test_with_a_noisy_delayed_sensor_the_batch_still_equals_single_environments(tmp_path):
    """A measurement model acts after every tick (TickEngine.finishes_each_tick): the batch then runs its ticks
    one compiled call each, and the observations are the delayed, noisy frames, seeded per episode."""
    from hil.gym.tasks import CONFIG_DIR

    cfg = tmp_path / "noisy.toml"
    cfg.write_text(f'include = ["{CONFIG_DIR / "elbow-hold.toml"}"]\n[sensor]\nangle_noise_deg = 0.5\n'
                   'velocity_noise_deg_s = 2.0\ndelay_ms = 8\n')
    n, steps = 2, 6
    batch = FesArmVectorEnv("ElbowHold", num_envs=n, config=str(cfg), **SHORT)
    assert batch.episodes.arms._each_tick
    actions = np.random.default_rng(5).uniform(0, 1, (steps, n, 2)).astype(np.float32)
    obs, _ = batch.reset(seed=20)
    seen = [obs]
    for t in range(steps):
        seen.append(batch.step(actions[t])[0])
    for i in range(n):
        env = FesArmEnv("ElbowHold", config=str(cfg), **SHORT)
        obs, _ = env.reset(seed=20 + i)
        assert obs.tobytes() == seen[0][i].tobytes()
        for t in range(steps):
            obs = env.step(actions[t, i])[0]
            assert obs.tobytes() == seen[t + 1][i].tobytes(), (i, t)
    again = [env.reset(seed=20 + n - 1)[0]] + [env.step(actions[t, n - 1])[0] for t in range(steps)]
    assert [o.tobytes() for o in again] == [o[n - 1].tobytes() for o in seen]      # the seed sets the noise
    assert seen[1][0][0] != seen[1][1][0] or seen[2][0][0] != seen[2][1][0]       # other seeds, other noise
    quiet = FesArmEnv("ElbowHold", **SHORT)
    quiet.reset(seed=20)
    assert quiet.step(actions[0, 0])[0][0] != seen[1][0][0]      # the noise reaches the observation


def test_a_delayed_sensor_delays_the_observation_as_in_the_service(tmp_path):
    from hil.config import load_service_config
    from hil.gym.tasks import CONFIG_DIR
    from hil.service.build import build_tick_engine

    cfg = tmp_path / "delayed.toml"
    cfg.write_text(f'include = ["{CONFIG_DIR / "elbow-hold.toml"}"]\n[sensor]\ndelay_ms = 8\n')
    env = FesArmEnv("ElbowHold", config=str(cfg))
    env.reset(seed=0, options={"hand_load_kg": 0.0})
    _, engine = build_tick_engine(load_service_config(cfg))
    engine.warmup()
    for step, action in enumerate(random_actions(env.action_space, 6, seed=2)):
        obs = env.step(action)[0]
        for k in range(5):
            engine.begin(5 * step + k)
            if k == 0:
                for c, pw, amp, freq in env.episodes.arms.actions.commands(np.asarray(action, float)):
                    engine.channel(0, 0, c, pw, amp, freq, 0)
            frame = engine.step().frame
        assert obs[0] == np.float32(frame["q"][0][9]) and frame["tick"][0] == 5 * step + 2


def test_lab_sensor_noise_is_drawn_per_episode_from_the_seed():
    imu = str(Path(__file__).resolve().parents[2] / "configs" / "elbow-hold-imu.toml")
    env = FesArmEnv("ElbowHold", config=imu, observe=("imu_gyro",), **SHORT)
    action = np.zeros(2, np.float32)

    def first_steps(seed):      # the same target and load: only the noise differs between seeds
        env.reset(seed=seed, options={"target_deg": 90.0, "hand_load_kg": 0.0})
        return [env.step(action)[0][:-1].tobytes() for _ in range(3)]      # the gyro rates, not the target

    a, b, a_again = first_steps(1), first_steps(2), first_steps(1)
    assert a == a_again and a != b


def test_stable_baselines3s_per_environment_calls_act_on_the_chosen_arms():
    """SB3's get_attr / set_attr / env_method address single environments; here they address the arms: a reset of
    one arm is the single environment's reset and leaves the others (and its episode's length starts again)."""
    from hil.gym.sb3 import FesArmSb3VecEnv

    venv = FesArmSb3VecEnv("ElbowHold", num_envs=3, plant="mtg", render_mode="rgb_array", **SHORT)
    venv.reset()
    venv.step(np.full((3, 2), 0.5))
    others, steps = venv.episodes.obs[[0, 2]].copy(), venv.episodes.steps.copy()
    [(obs, info)] = venv.env_method("reset", indices=[1], seed=5, options={"target_deg": 70.0})
    single_obs, single_info = FesArmEnv("ElbowHold", plant="mtg", **SHORT).reset(seed=5, options={"target_deg": 70.0})
    assert np.array_equal(obs, single_obs) and info["time_s"] == single_info["time_s"] == 0.0
    assert np.array_equal(venv.episodes.obs[[0, 2]], others) and list(venv.episodes.steps) == [steps[0], 0, steps[2]]
    lengths = {}
    while 1 not in lengths:
        _, _, dones, infos = venv.step(np.full((3, 2), 0.5))
        lengths.update({i: infos[i]["episode"]["l"] for i in np.flatnonzero(dones) if i not in lengths})
    assert lengths[1] == lengths[0] == venv.episodes.max_steps
    pictures = venv.env_method("render", indices=[0, 2])
    assert all(np.array_equal(p, venv.episodes.picture(i)) for p, i in zip(pictures, (0, 2), strict=True))
    assert venv.get_attr("render_mode", indices=2) == ["rgb_array"]
    with pytest.raises(ValueError, match="one batch and share it"):
        venv.set_attr("render_mode", None, indices=[0])
    venv.set_attr("render_mode", None)
    assert venv.env_method("render") == [None] * 3
    with pytest.raises(ValueError, match="an arm answers reset and render"):
        venv.env_method("close")
    with pytest.raises(ValueError, match="arm numbers from 0 to 2, not 3"):
        venv.get_attr("dt", indices=[0, 3])


def test_a_reset_observes_the_lab_sensors_reading_of_the_initial_state(tmp_path):
    """Before the first tick no IMU sample exists: the reset observation is the sensors' noise-free reading of the
    initial state (the segments' orientation, zero rate at rest, the encoder's count), not the zeros of an unsampled
    frame (no quaternion), and taking it draws nothing from the sensors' generator nor moves their sampling state."""
    from sim.das3.kinematics import frames
    from sim.das3.model import HUMERUS_FRAME, RADIUS_FRAME

    config = tmp_path / "lab.toml"
    config.write_text(f'include = ["{ROOT / "configs" / "gym" / "elbow-hold.toml"}"]\n[sensor.imu]\n'
                      '[sensor.encoder]\njoints = ["ELx"]\n')
    observe = ("imu_quat", "imu_gyro", "encoder_ELx")
    env = FesArmEnv("ElbowHold", config=str(config), observe=observe, **SHORT)
    obs, _ = env.reset(seed=0)
    engine = env.episodes.arms.arms[0].engine
    q = engine.plant.outputs.q
    R, _ = frames(env.episodes.arms.segment_model(0).arrays, q)
    for s, f in enumerate((HUMERUS_FRAME, RADIUS_FRAME)):
        x, y, z, w = Rotation.from_matrix(R[0, f]).as_quat()
        assert np.allclose(obs[4 * s:4 * s + 4], np.array([w, x, y, z]) * (1 if w >= 0 else -1), atol=1e-6)
    assert np.allclose(obs[8:14], 0.0, atol=1e-6) and obs[14] == np.rint(q[9] * 4096 / (2 * np.pi)) != 0
    lab = engine.sensor.lab
    before = [a.copy() for a in (lab.rng, lab.imu[4], lab.imu[5], lab.imu[6])]
    lab.reading_before_start(q, engine.plant.outputs.qdot, np.zeros(1, engine.sensor.dtype))
    assert all(np.array_equal(a, b) for a, b in zip(before, (lab.rng, lab.imu[4], lab.imu[5], lab.imu[6])))
    batch = FesArmVectorEnv("ElbowHold", num_envs=2, config=str(config), observe=observe, **SHORT)
    batch_obs, _ = batch.reset(seed=[0, 1])
    assert np.array_equal(batch_obs[0], obs)
    action = env.action_space.sample()
    assert np.array_equal(batch.step(np.stack([action, action]))[0][0], env.step(action)[0])


def test_lab_sensors_run_in_the_compiled_ticks_and_the_batch_stays_the_single_environment(tmp_path):
    """The lab sensors run inside the compiled tick (``hil.rt.tick_kernel.tick_outputs``), so an engine with them and
    no other measurement model books its ticks in bulk, and a batch's arm stays its single environment bit for bit
    (IMU noise and biases from the sensors' own generator, over several action steps)."""
    config = tmp_path / "lab.toml"
    config.write_text(f'include = ["{ROOT / "configs" / "gym" / "elbow-hold-mtg.toml"}"]\n[sensor.imu]\n'
                      '[sensor.encoder]\njoints = ["ELx"]\n')
    observe = ("imu_quat", "imu_gyro", "encoder_ELx")
    single = FesArmEnv("ElbowHold", config=str(config), observe=observe, **SHORT)
    batch = FesArmVectorEnv("ElbowHold", num_envs=3, config=str(config), observe=observe, **SHORT)
    assert not single.episodes.arms.arms[0].engine.finishes_each_tick
    single.reset(seed=4)
    batch.reset(seed=[4, 5, 6])
    rng = np.random.default_rng(0)
    for _ in range(8):
        action = rng.random(single.action_space.shape).astype(np.float32)
        obs = single.step(action)[0]
        batch_obs = batch.step(np.stack([action] * 3))[0]
        assert np.array_equal(batch_obs[0], obs)
    assert np.ptp(batch_obs[:, 8:14], axis=0).max() > 0      # the arms' gyro noise differs by seed
