"""hil.bench.throughput counts what the environment did (steps, episodes, autoresets) and charges CPU time,
against gymnasium's own CartPole, SyncVectorEnv and AsyncVectorEnv. Counts only: no timings are asserted."""
import gymnasium as gym
import pytest

from hil.bench.throughput import Throughput, machine, measure, measure_factory


class Counted(gym.Wrapper):
    """CartPole that counts the step() and reset() calls it receives."""

    def __init__(self, env):
        super().__init__(env)
        self.steps = self.resets = 0

    def step(self, action):
        self.steps += 1
        return self.env.step(action)

    def reset(self, **kwargs):
        self.resets += 1
        return self.env.reset(**kwargs)


def counted_vector(n, mode):
    envs = gym.vector.SyncVectorEnv([lambda: Counted(gym.make("CartPole-v1"))] * n, autoreset_mode=mode)
    return envs, [e for e in envs.envs]


def test_single_env_counts_every_step_and_reset():
    env = Counted(gym.make("CartPole-v1"))
    row = measure(env, steps=1500, warmup=0, seed=3)
    assert row.env_steps == row.sim_steps == row.calls == env.steps == 1500
    assert row.episodes == row.resets == env.resets - 1 > 10          # the first reset is measure()'s own
    assert row.cpu_s > 0 and row.wall_s > 0 and row.threads >= 1 and row.num_envs == 1


def test_warmup_is_stepped_but_not_counted():
    env = Counted(gym.make("CartPole-v1"))
    row = measure(env, steps=500, warmup=300, seed=0)
    assert env.steps == 800 and row.env_steps == 500
    assert 0 < row.episodes < env.resets - 1                      # the warm-up's episodes are not counted


def test_next_step_autoreset_slots_are_counted_and_not_simulated():
    envs, subs = counted_vector(8, gym.vector.AutoresetMode.NEXT_STEP)
    row = measure(envs, steps=2000, warmup=0, seed=1)
    assert row.calls == 250 and row.env_steps == 2000
    assert sum(e.steps for e in subs) == row.sim_steps == row.env_steps - row.resets
    assert sum(e.resets for e in subs) - 8 == row.resets > 10
    assert 0 <= row.episodes - row.resets <= 8                    # episodes that ended in the last call
    assert row.cpu_s > 0


@pytest.mark.parametrize("mode", [gym.vector.AutoresetMode.SAME_STEP, gym.vector.AutoresetMode.DISABLED])
def test_same_step_and_disabled_reset_without_losing_a_step(mode):
    envs, subs = counted_vector(4, mode)
    row = measure(envs, steps=1000, warmup=0, seed=2)
    assert sum(e.steps for e in subs) == row.sim_steps == row.env_steps == 1000
    assert sum(e.resets for e in subs) - 4 == row.resets == row.episodes > 10


def test_steps_round_up_to_whole_calls_and_period_gives_simulated_time():
    row = measure_factory(lambda: gym.make_vec("CartPole-v1", 3, vectorization_mode="sync"), steps=100, warmup=0,
                          control_period_s=0.02)
    assert row.calls == 34 and row.env_steps == 102
    assert row.sim_s_per_wall_s == pytest.approx(row.sim_steps * 0.02 / row.wall_s)
    assert row.steps_per_cpu_s == pytest.approx(102 / row.cpu_s)


def test_control_period_read_from_the_environment():
    assert measure(gym.make("Pendulum-v1"), 10, 0).control_period_s == pytest.approx(0.05)
    assert measure_factory(lambda: gym.make_vec("Pendulum-v1", 2, vectorization_mode="sync"), 10, 0) \
        .control_period_s == pytest.approx(0.05)
    assert measure(gym.make("CartPole-v1"), 10, 0).control_period_s is None


def test_async_workers_are_found_and_charged():
    row = measure_factory(lambda: gym.make_vec("CartPole-v1", 2, vectorization_mode="async"), steps=400, warmup=0)
    assert row.threads >= 3                                       # this process and the two workers
    assert row.env_steps == 400 and row.cpu_s > 0


def test_row_round_trips_through_json_fields():
    row = measure(gym.make("CartPole-v1"), 50, 0, label="x")
    doc = row.as_dict()
    assert Throughput.from_dict(doc) == row
    assert {"steps_per_s", "steps_per_cpu_s", "cores_used", "sim_s_per_wall_s"} <= doc.keys()


def test_machine_and_bad_step_counts():
    m = machine()
    assert m.cpus >= m.cpus_allowed >= 1 and m.cpu_model
    with pytest.raises(ValueError, match="steps must be >= 1"):
        measure(gym.make("CartPole-v1"), 0)
