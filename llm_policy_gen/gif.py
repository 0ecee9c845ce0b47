"""``evaluate --gif FILE``: an animation of a table policy acting in its environment.

One seeded episode is run with ``render_mode="rgb_array"``; every ``frame_every``-th frame (and the last) is kept,
at most ``max_frames`` of them, and written as a looping GIF with ``imageio`` (the ``[gif]`` extra). The file is
written to a temporary name and renamed, like every other output.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from .envs.make import make_env
from .envs.spec import EnvSpec
from .errors import UserError
from .policy import TablePolicy

__all__ = ["record_frames", "save_gif"]


def record_frames(
    policy: TablePolicy, spec: EnvSpec, seed: int = 0, frame_every: int = 2, max_frames: int = 300
) -> tuple[list[np.ndarray], float, int]:
    """Frames of one greedy episode, its return and its length."""
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # rgb_array frames need no display (pygame-based renderers)
    env = make_env(spec, render_mode="rgb_array")
    frames: list[np.ndarray] = []
    ret, steps = 0.0, 0
    try:
        obs, _ = env.reset(seed=int(seed))
        frame: Any = env.render()
        while True:
            if steps % frame_every == 0 and len(frames) < max_frames and frame is not None:
                frames.append(np.asarray(frame))
            a = policy.act(np.asarray(obs))
            obs, r, term, trunc, _ = env.step(policy.actions.to_env(a)[0])
            ret += float(r)
            steps += 1
            frame = env.render()
            if term or trunc:
                if frame is not None and len(frames) < max_frames + 1:
                    frames.append(np.asarray(frame))
                break
    finally:
        env.close()
    if not frames:
        raise UserError(f"{spec.env_id} rendered no rgb_array frames; it cannot be saved as a GIF")
    return frames, ret, steps


def save_gif(
    policy: TablePolicy, spec: EnvSpec, path: Path, seed: int = 0, fps: int = 30, frame_every: int = 2,
    max_frames: int = 300,
) -> Path:
    """Run one episode of ``policy`` on ``spec`` (seeded by ``seed``) and save it as a GIF at ``path``."""
    path = Path(path)
    if path.suffix.lower() != ".gif":
        raise UserError(f"bad --gif {str(path)!r}: the file name must end with .gif")
    try:
        import imageio.v3 as imageio
    except ImportError:
        raise UserError("--gif needs imageio: pip install 'llm-policy-gen[gif]'") from None
    frames, _, _ = record_frames(policy, spec, seed, frame_every, max_frames)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.tmp.gif")
    try:
        imageio.imwrite(tmp, np.stack(frames), duration=1000.0 * frame_every / fps, loop=0)
        tmp.replace(path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path
