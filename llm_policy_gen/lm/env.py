"""The environment as a library learner steps it: state indices in, action indices out, every episode recorded.

SB3 steps its own environment, so the run's collector does not play these episodes. :func:`learner_env` wraps the
spec's environment so that the run still counts them as its own: every reset takes the run's next training seed
(``next_seed``, the same seed plan the other modes' training episodes use, whatever seed SB3 passes), and every
finished episode is kept as an :class:`~llm_policy_gen.collect.Episode` (its states, actions and rewards) until the
mode hands it to the run (:meth:`EpisodeRecorder.take`). The observation the learner sees is the discretized state's
index (``Discrete(n_states)``), and its actions are the spec's action indices, mapped to the environment's own
actions as tables are (:meth:`~llm_policy_gen.discretize.ActionDiscretizer.to_env`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

from ..collect import Episode
from ..envs.make import make_env
from ..envs.spec import EnvSpec

__all__ = ["EpisodeRecorder", "learner_env"]


class EpisodeRecorder(gym.Wrapper[Any, Any, Any, Any]):
    """Seeds every reset from ``next_seed`` and records each episode in state and action indices."""

    def __init__(self, env: gym.Env[Any, Any], spec: EnvSpec, next_seed: Callable[[], int]) -> None:
        super().__init__(env)
        self.observation_disc = spec.observation_discretizer()
        self.action_disc = spec.action_discretizer()
        self.next_seed = next_seed
        self.n_states = self.observation_disc.n_states
        self.observation_space = gym.spaces.Discrete(self.n_states)
        self.action_space = gym.spaces.Discrete(self.action_disc.n_actions)
        self.iteration = 0
        """Stamped on the episodes that end from now on (the mode sets it before each update)."""
        self.finished: list[Episode] = []
        self._seed = -1
        self._states: list[int] = []
        self._actions: list[int] = []
        self._rewards: list[float] = []
        self._state = 0

    def _index(self, obs: Any) -> int:
        return int(self.observation_disc.encode(np.asarray(obs)[None, ...])[0])

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
        self._seed = int(self.next_seed())
        obs, info = self.env.reset(seed=self._seed, options=options)
        self._states, self._actions, self._rewards = [], [], []
        self._state = self._index(obs)
        return self._state, info

    def step(self, action: Any) -> tuple[int, SupportsFloat, bool, bool, dict[str, Any]]:
        a = int(action)
        env_action = self.action_disc.to_env(np.asarray([a]))[0]
        obs, reward, terminated, truncated, info = self.env.step(env_action)
        self._states.append(self._state)
        self._actions.append(a)
        self._rewards.append(float(reward))
        self._state = self._index(obs)
        if terminated or truncated:
            self.finished.append(Episode(self._seed, np.asarray(self._states, dtype=np.int64),
                                         np.asarray(self._actions, dtype=np.int64),
                                         np.asarray(self._rewards, dtype=np.float64), bool(terminated),
                                         bool(truncated), self.iteration))
        return self._state, reward, terminated, truncated, info

    def take(self) -> list[Episode]:
        """The episodes finished since the last call."""
        out, self.finished = self.finished, []
        return out


def learner_env(spec: EnvSpec, next_seed: Callable[[], int]) -> EpisodeRecorder:
    """The spec's environment as the learner steps it (see the module doc)."""
    return EpisodeRecorder(make_env(spec), spec, next_seed)
