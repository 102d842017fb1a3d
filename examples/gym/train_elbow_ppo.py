"""Train a PPO policy (Stable-Baselines3, CPU) on fes_hil/ElbowHold-v0 and save it for the ``policy`` plug-in.

    python3 examples/gym/train_elbow_ppo.py --timesteps 300000 --out examples/gym/elbow_ppo_policy.npz

The batched arms (``hil.gym.sb3.FesArmSb3VecEnv``) step ``--envs`` environments at once; observations are
normalised by SB3's ``VecNormalize`` (its running mean and variance go into the policy file, so the plug-in
normalises as in training). Then ``configs/gym/elbow-ppo.toml`` runs the policy in ``hil run`` and
``examples/gym/compare_with_pid.py`` compares it with the built-in PID.
"""
from __future__ import annotations

import argparse
import time

import torch
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import VecNormalize

from hil.gym.policy_file import save_sb3_policy
from hil.gym.sb3 import FesArmSb3VecEnv

OBS_CLIP = 10.0
"""VecNormalize's default observation clip (in standard deviations)."""
LOG_STD_INIT = -1.5
"""Initial log standard deviation of the Gaussian actions: 0.22 of a channel's range (SB3's default, 1, explores
mostly at the limits of the [0, 1] levels, where the arm is driven to the end of its range)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timesteps", type=int, default=300_000)
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plant", default="das3", choices=("das3", "mtg"))
    parser.add_argument("--max-load-kg", type=float, default=0.5, help="hand loads drawn in 0..this")
    parser.add_argument("--out", default="examples/gym/elbow_ppo_policy.npz")
    args = parser.parse_args()
    torch.set_num_threads(1)
    arms = FesArmSb3VecEnv("ElbowHold", num_envs=args.envs, seed=args.seed, plant=args.plant,
                           hand_load_kg=(0.0, args.max_load_kg))
    env = VecNormalize(arms, norm_obs=True, norm_reward=True, clip_obs=OBS_CLIP, gamma=0.99)
    model = PPO("MlpPolicy", env, n_steps=256, batch_size=256, n_epochs=10, learning_rate=3e-4, gamma=0.99,
                gae_lambda=0.95, ent_coef=0.0, seed=args.seed, device="cpu", verbose=1,
                policy_kwargs={"log_std_init": LOG_STD_INIT})
    start = time.perf_counter()
    model.learn(total_timesteps=args.timesteps)
    print(f"trained {args.timesteps} steps in {time.perf_counter() - start:.0f} s")
    save_sb3_policy(args.out, model, arms.episodes, obs_rms=env.obs_rms, obs_clip=OBS_CLIP)
    print(f"policy -> {args.out}")


if __name__ == "__main__":
    main()
