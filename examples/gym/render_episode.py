"""An episode of ``fes_hil/ElbowHold-v0`` driven by a saved policy (the PPO example's by default), drawn with the
environment's ``render_mode="rgb_array"`` (hil.gym.render) at evenly spaced steps and saved as one PNG, the frames
two to a row, left to right and top to bottom (front and side view in each).

    python3 examples/gym/render_episode.py [--policy examples/gym/elbow_ppo_policy.npz] [--target-deg 90] \
        [--frames 4] [--out docs/img/gym-render.png]

For a video, wrap the environment in Gymnasium's ``RecordVideo`` (needs ``moviepy``) instead.
"""
from __future__ import annotations

import argparse

import gymnasium as gym
import matplotlib.image
import numpy as np

import hil.gym  # noqa: F401  (registers the environments)
from drivers.controllers.policy import read_policy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", default="examples/gym/elbow_ppo_policy.npz")
    parser.add_argument("--target-deg", type=float, default=90.0)
    parser.add_argument("--frames", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="docs/img/gym-render.png")
    args = parser.parse_args()
    policy = read_policy(args.policy)
    env = gym.make("fes_hil/ElbowHold-v0", render_mode="rgb_array")
    obs, _ = env.reset(seed=args.seed, options={"target_deg": args.target_deg, "hand_load_kg": 0.0})
    steps = env.unwrapped.episodes.max_steps
    shown = set(np.linspace(0, steps, args.frames).round().astype(int).tolist())
    frames = [env.render()] if 0 in shown else []
    for step in range(1, steps + 1):
        action = np.clip(policy.act(obs), env.action_space.low, env.action_space.high).astype(np.float32)
        obs, _, terminated, truncated, info = env.step(action)
        if step in shown:
            frames.append(env.render())
        if terminated or truncated:
            break
    matplotlib.image.imsave(args.out, grid(frames))
    print(f"{len(frames)} frames of {step} steps ({step * env.unwrapped.dt:g} s), elbow error at the end "
          f"{np.degrees(info['error']):.1f} deg -> {args.out}")


def grid(frames: list[np.ndarray], per_row: int = 2) -> np.ndarray:
    """The frames, each framed in grey, ``per_row`` to a row (a short last row filled with white)."""
    framed = [np.pad(f, ((2, 2), (2, 2), (0, 0)), constant_values=160) for f in frames]
    framed += [np.full_like(framed[0], 255)] * (-len(framed) % per_row)
    return np.concatenate([np.concatenate(framed[k:k + per_row], axis=1)
                           for k in range(0, len(framed), per_row)], axis=0)


if __name__ == "__main__":
    main()
