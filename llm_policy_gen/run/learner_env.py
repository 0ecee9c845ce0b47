"""The environment an own-loop learner steps itself (:attr:`~llm_policy_gen.modes.base.RunServices.learner_env`).

A library learner (SB3's PPO) steps its own environment, so the run's collector does not play these episodes.
:class:`LearnerEnv` wraps the spec's environment so that the run still counts them as its own: every reset takes the
run's next training seed (``next_seed``, the same seed plan the other modes' training episodes use, whatever seed
the learner passes), and every finished episode is handed to ``on_episode`` as it ends (the run counts it) and kept
until :meth:`LearnerEnv.take`. The observation the learner sees is the discretized state's index
(``Discrete(n_states)``), and its actions are the spec's action indices, mapped to the environment's own actions as
tables are (:meth:`~llm_policy_gen.discretize.ActionDiscretizer.to_env`).

**State.** A learner's update may end inside an episode, which the next update goes on with. :meth:`state_dict`
holds that episode (its seed and the actions, states and rewards so far); :meth:`load_state_dict` plays it again
from its seed, so a resumed run's environment is where the interrupted one's was (a gymnasium environment is
deterministic given its reset seed and the actions; a replay that reaches other states is refused).

**Raw observations.** A learner on the environment's own observations (``--mode peer``) reads
:attr:`LearnerEnv.raw_obs`, the last observation as the environment gave it, and steps several such environments
(:meth:`LearnerEnv.sibling`: the same seed plan and counting, its own episode in progress).

**Native actions.** After :meth:`LearnerEnv.use_native_actions` (a peer on a task with a ``Box`` action space) the
learner acts in the environment's own action space: each action goes to the environment as the learner gives it. An
episode still records an action index per step (the spec's nearest levels, :func:`nearest_level`: what the run's
memory keeps), and the episode in progress also keeps the actions as given (``env_actions``, their own dtype), which
its replay on resume plays again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

from ..collect import Episode
from ..discretize import BoxActions
from ..envs.make import make_env
from ..envs.spec import EnvSpec

__all__ = ["LearnerEnv", "nearest_level"]


def nearest_level(actions: BoxActions, env_action: np.ndarray) -> int:
    """The flat index of the spec's levels nearest ``env_action`` (per dimension; the lower level on a tie)."""
    idx = [int(np.argmin(np.abs(actions.values[i] - float(a)))) for i, a in enumerate(np.ravel(env_action))]
    return int(np.ravel_multi_index(idx, tuple(int(n) for n in actions.levels)))


class LearnerEnv(gym.Wrapper[Any, Any, Any, Any]):
    """Seeds every reset from ``next_seed``, records each episode in state and action indices, and hands each
    finished one to ``on_episode``."""

    def __init__(self, spec: EnvSpec, next_seed: Callable[[], int], on_episode: Callable[[Episode], Episode],
                 env: gym.Env[Any, Any] | None = None) -> None:
        super().__init__(env if env is not None else make_env(spec))
        self.env_spec = spec
        self.observation_disc = spec.observation_discretizer()
        self.action_disc = spec.action_discretizer()
        self.next_seed = next_seed
        self.on_episode = on_episode
        """Called with each finished episode; returns it as counted (stamped with its iteration)."""
        self.n_states = self.observation_disc.n_states
        self.observation_space = gym.spaces.Discrete(self.n_states)
        self.action_space = gym.spaces.Discrete(self.action_disc.n_actions)
        self.finished: list[Episode] = []
        self._seed: int | None = None
        self._states: list[int] = []
        self._actions: list[int] = []
        self._rewards: list[float] = []
        self._state = 0
        self.raw_obs: Any = None
        """The last observation as the environment gave it (before discretization)."""
        self.siblings: list[LearnerEnv] = []
        """The environments :meth:`sibling` made."""
        self.native = False
        """The learner gives the environment's own actions (:meth:`use_native_actions`)."""
        self._env_actions: list[np.ndarray] = []

    def use_native_actions(self) -> None:
        """From now on the learner acts in the environment's own ``Box`` action space (see the module doc); a task
        whose actions are not a ``Box`` cut into the spec's levels raises ``ValueError``."""
        if not isinstance(self.env.action_space, gym.spaces.Box) or not isinstance(self.action_disc, BoxActions):
            raise ValueError(f"native actions need a Box action space, not {self.env.action_space}")
        self.native = True
        self.action_space = self.env.action_space

    def sibling(self) -> LearnerEnv:
        """Another environment of the same run: its resets take the same seed plan's next seeds and its episodes are
        counted as this one's (a learner stepping several; each holds its own episode in progress)."""
        twin = LearnerEnv(self.env_spec, self.next_seed, self.on_episode)
        if self.native:
            twin.use_native_actions()
        self.siblings.append(twin)
        return twin

    @property
    def steps_in_progress(self) -> int:
        """Steps of the episodes in progress here and in the siblings: taken (a learner learned from them) but not
        counted until their episodes end."""
        return (len(self._states) if self._seed is not None else 0) + sum(e.steps_in_progress for e in self.siblings)

    def _index(self, obs: Any) -> int:
        return int(self.observation_disc.encode(np.asarray(obs)[None, ...])[0])

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
        self._seed = int(self.next_seed())
        obs, info = self.env.reset(seed=self._seed)
        self._states, self._actions, self._rewards, self._env_actions = [], [], [], []
        self._state, self.raw_obs = self._index(obs), obs
        return self._state, info

    def _step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        if self.native:
            assert isinstance(self.action_disc, BoxActions)
            env_action = np.array(action, copy=True)  # a vector env hands a view of its batch
            a = nearest_level(self.action_disc, env_action)
            self._env_actions.append(env_action)
        else:
            a = int(action)
            env_action = self.action_disc.to_env(np.asarray([a]))[0]
        obs, reward, terminated, truncated, info = self.env.step(env_action)
        self._states.append(self._state)
        self._actions.append(a)
        self._rewards.append(float(reward))
        self._state, self.raw_obs = self._index(obs), obs
        return obs, reward, terminated, truncated, info

    def step(self, action: Any) -> tuple[int, SupportsFloat, bool, bool, dict[str, Any]]:
        _, reward, terminated, truncated, info = self._step(action)
        if terminated or truncated:
            assert self._seed is not None
            episode = Episode(self._seed, np.asarray(self._states, dtype=np.int64),
                              np.asarray(self._actions, dtype=np.int64), np.asarray(self._rewards, dtype=np.float64),
                              bool(terminated), bool(truncated), 0)
            self.finished.append(self.on_episode(episode))
            self._seed = None
        return self._state, reward, terminated, truncated, info

    def take(self) -> list[Episode]:
        """The episodes finished (and counted) since the last call."""
        out, self.finished = self.finished, []
        return out

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """The episode in progress (``seed`` None: none started, or the last one finished without a reset); with
        native actions also the actions as given (``env_actions``)."""
        state = {"seed": self._seed, "state": self._state, "states": np.asarray(self._states, dtype=np.int64),
                 "actions": np.asarray(self._actions, dtype=np.int64),
                 "rewards": np.asarray(self._rewards, dtype=np.float64)}
        if self.native:
            space = self.env.action_space
            state["env_actions"] = (np.stack(self._env_actions) if self._env_actions else
                                    np.zeros((0, *(space.shape or ())), dtype=space.dtype))
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """The episode in progress played again from its seed (nothing counted); a replay that reaches other
        states than the recorded ones raises ``ValueError``."""
        self.finished = []
        seed = state["seed"]
        states = [int(x) for x in np.asarray(state["states"], dtype=np.int64)]
        actions = [int(x) for x in np.asarray(state["actions"], dtype=np.int64)]
        rewards = [float(x) for x in np.asarray(state["rewards"], dtype=np.float64)]
        given: list[Any] = list(actions)
        if self.native:
            if "env_actions" not in state:
                raise ValueError("the learner environment's episode in progress has no native actions to replay")
            given = list(np.asarray(state["env_actions"]))
        if not len(states) == len(actions) == len(rewards) == len(given):
            raise ValueError("the learner environment's episode in progress has unequal states, actions and rewards")
        if seed is None:
            self._seed, self._states, self._actions, self._rewards, self._env_actions = None, [], [], [], []
            self._state = int(state["state"])
            return
        self._seed = int(seed)
        obs, _ = self.env.reset(seed=self._seed)
        self._states, self._actions, self._rewards, self._env_actions = [], [], [], []
        self._state, self.raw_obs = self._index(obs), obs
        for a in given:
            _, _, terminated, truncated, _ = self._step(a)
            if terminated or truncated:
                raise ValueError("the learner environment's episode in progress ends when it is played again")
        if (self._states != states or self._actions != actions or self._rewards != rewards
                or self._state != int(state["state"])):
            raise ValueError(f"the learner environment's episode in progress (seed {self._seed}, {len(actions)} "
                             "steps) reaches other states when it is played again")
