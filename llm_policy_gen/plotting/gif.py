"""``evaluate --gif FILE``: an animation of a table policy acting in its environment.

One seeded episode is run with ``render_mode="rgb_array"``; every ``frame_every``-th frame (and the last) is kept,
at most ``max_frames`` of them, and written as a looping GIF with ``imageio`` (the ``[gif]`` extra). The file is
written to a temporary name and renamed, like every other output.

MuJoCo tasks render through OpenGL. Without a display (a server, CI, Slurm) and without ``MUJOCO_GL`` set, the first
headless backend of :data:`HEADLESS_GL` that can make a context here is chosen (EGL, then OSMesa), each tried once in
a child process; when none works the GIF is refused with one line that says what to install. A ``MUJOCO_GL`` the
user set is kept as it is.
"""

from __future__ import annotations

import os
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from ..envs.make import make_env
from ..envs.spec import EnvSpec
from ..errors import UserError, missing_extra
from ..policy import TablePolicy
from ..schema.argtypes import check_out_file

__all__ = ["HEADLESS_GL", "check_gif_path", "choose_headless_gl", "record_frames", "save_gif"]

HEADLESS_GL: tuple[tuple[str, str], ...] = (("egl", "libegl1"), ("osmesa", "libosmesa6"))
"""``MUJOCO_GL`` values that render without a display, in order of preference, with the Debian/Ubuntu package
that provides each."""


def _has_display() -> bool:
    return sys.platform != "linux" or bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


@cache
def _gl_works(name: str) -> bool:
    """MuJoCo can make an offscreen OpenGL context with ``MUJOCO_GL=name`` (tried in a child process, because
    PyOpenGL fixes its platform once per process)."""
    code = f"from mujoco.{name} import GLContext; c = GLContext(16, 16); c.make_current(); c.free()"
    env = {**os.environ, "MUJOCO_GL": name, "PYOPENGL_PLATFORM": name}
    try:
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=120, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def _install_hint() -> str:
    packages = " or ".join(f"{pkg} ({name.upper() if name == 'egl' else name})" for name, pkg in HEADLESS_GL)
    return (f"install one with apt-get install {packages}, set MUJOCO_GL to a backend that works here, "
            "or run where a display is available")


def choose_headless_gl(env_id: str) -> str | None:
    """Make sure MuJoCo can render ``env_id`` offscreen: returns the ``MUJOCO_GL`` in use (None with a display and
    no choice made); sets ``MUJOCO_GL`` (and ``PYOPENGL_PLATFORM``) to the first backend of :data:`HEADLESS_GL` that
    works when there is no display; :class:`UserError` when none does."""
    chosen = os.environ.get("MUJOCO_GL", "").strip()
    if chosen:
        return chosen
    if _has_display():
        return None
    for name, _ in HEADLESS_GL:
        if _gl_works(name):
            os.environ["MUJOCO_GL"] = name
            os.environ.setdefault("PYOPENGL_PLATFORM", name)
            return name
    tried = ", ".join(name for name, _ in HEADLESS_GL)
    raise UserError(f"--gif on {env_id} renders with OpenGL and there is no display; no headless backend works "
                    f"here (tried MUJOCO_GL={tried}): {_install_hint()}")


def _is_mujoco(env: Any) -> bool:
    try:
        from gymnasium.envs.mujoco.mujoco_env import MujocoEnv
    except ImportError:  # mujoco is not installed: the task is not a MuJoCo one
        return False
    return isinstance(env.unwrapped, MujocoEnv)


def _first_frame(env: Any, spec: EnvSpec, mujoco: bool) -> Any:
    """``env.render()`` once; a renderer that cannot start here is a one-line :class:`UserError`."""
    try:
        return env.render()
    except Exception as exc:  # mujoco.FatalError, RuntimeError, pygame.error: the host cannot render
        detail = (str(exc).splitlines() or [""])[0][:200]
        backend = f" with MUJOCO_GL={os.environ.get('MUJOCO_GL')}" if mujoco and os.environ.get("MUJOCO_GL") else ""
        hint = f"; {_install_hint()}" if mujoco else ""
        raise UserError(f"{spec.env_id} cannot render frames here{backend} ({type(exc).__name__}: {detail}){hint}"
                        ) from None


def record_frames(
    policy: TablePolicy, spec: EnvSpec, seed: int = 0, frame_every: int = 2, max_frames: int = 300
) -> tuple[list[np.ndarray], float, int]:
    """Frames of one greedy episode, its return and its length."""
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # rgb_array frames need no display (pygame-based renderers)
    env = make_env(spec, render_mode="rgb_array")
    frames: list[np.ndarray] = []
    ret, steps = 0.0, 0
    try:
        mujoco = _is_mujoco(env)
        if mujoco:
            choose_headless_gl(spec.env_id)
        obs, _ = env.reset(seed=int(seed))
        frame: Any = _first_frame(env, spec, mujoco)
        if frame is not None:
            frames.append(np.asarray(frame))
        while True:
            a = policy.act(np.asarray(obs))
            obs, r, term, trunc, _ = env.step(policy.actions.to_env(a)[0])
            ret += float(r)
            steps += 1
            last = bool(term or trunc)
            # Only the frames kept are rendered (a MuJoCo frame costs tens of milliseconds without a GPU).
            if (steps % frame_every == 0 and len(frames) < max_frames) or (last and len(frames) < max_frames + 1):
                frame = env.render()
                if frame is not None:
                    frames.append(np.asarray(frame))
            if last:
                break
    finally:
        env.close()
    if not frames:
        raise UserError(f"{spec.env_id} rendered no rgb_array frames; it cannot be saved as a GIF")
    return frames, ret, steps


def check_gif_path(path: Path) -> Path:
    """``path``, or a :class:`UserError` when it does not end with ``.gif`` or its folder does not exist."""
    if path.suffix.lower() != ".gif":
        raise UserError(f"bad --gif {str(path)!r}: the file name must end with .gif")
    return check_out_file(path, "--gif")


def save_gif(
    policy: TablePolicy, spec: EnvSpec, path: Path, seed: int = 0, fps: int = 30, frame_every: int = 2,
    max_frames: int = 300,
) -> Path:
    """Run one episode of ``policy`` on ``spec`` (seeded by ``seed``) and save it as a GIF at ``path``."""
    path = check_gif_path(Path(path))
    try:
        import imageio.v3 as imageio
    except ImportError:
        raise missing_extra("--gif needs imageio", "gif") from None
    frames, _, _ = record_frames(policy, spec, seed, frame_every, max_frames)
    tmp = path.with_name(f".{path.stem}.tmp.gif")
    try:
        imageio.imwrite(tmp, np.stack(frames), duration=1000.0 * frame_every / fps, loop=0)
        tmp.replace(path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path
