"""The peer's learner: SB3 PPO, DQN, SAC or TD3, or sb3-contrib TRPO, with the zoo's settings, over the run's
environments.

The learner steps ``n_envs`` of the run's learner environments (:attr:`~llm_policy_gen.modes.base.RunServices.
learner_env` and its siblings: every reset takes the run's next training seed, every finished episode is counted by
the run) through :class:`RawObservations`, so it sees the environment's own observations, and acts in the action
space its environments give it: the environment's own ``Box`` once the mode made them native
(:meth:`~llm_policy_gen.run.learner_env.LearnerEnv.use_native_actions`; SB3 clips or rescales its actions to it as
under the zoo), else the spec's action indices. ``VecNormalize`` wraps them where the zoo says so, and TD3 gets the
zoo's action noise. Schedules (``lin_X``) run over the run's budget in steps (:class:`Horizon`), whatever the chunks
it learns in.

One :meth:`PeerLearner.update` is one ``learn`` call of ``chunk`` steps (``reset_num_timesteps=False``: the
environments go on where the last chunk left them).

**State** (:meth:`PeerLearner.state_dict`): the network's tensors, the optimiser's moments, the random streams, SB3's
counters and last observations, the ``VecNormalize`` statistics and running returns, and the siblings' episodes in
progress, as arrays and JSON values (:mod:`llm_policy_gen.lm.state`), never a pickle. Saved after an update, it gives
a learner whose next update is the uninterrupted one's for the on-policy algorithms (their rollout buffer is refilled
at every update; gSDE draws its noise afresh at every rollout). The off-policy algorithms' replay buffer (DQN, SAC,
TD3) is not saved: such a run does not resume (:data:`RESUMES`).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from .zoo import Hyper

__all__ = ["PeerLearner", "RawObservations", "Horizon", "algo_class", "RESUMES"]

RESUMES = ("ppo", "trpo")
"""The algorithms whose state the checkpoint holds whole (on-policy: no replay buffer between updates)."""


class Horizon:
    """Progress for schedules measured against ``horizon`` steps (clamped at 0), not against one ``learn`` call."""

    horizon: int = 0
    num_timesteps: int
    _current_progress_remaining: float

    def _update_current_progress_remaining(self, num_timesteps: int, total_timesteps: int) -> None:
        self._current_progress_remaining = max(0.0, 1.0 - float(num_timesteps) / float(self.horizon or
                                                                                       total_timesteps))


_HORIZON_CLASSES: dict[str, Any] = {}


def algo_class(algo: str) -> Any:
    """The library class for ``algo`` (ppo, dqn, sac, td3; trpo from sb3-contrib), with :class:`Horizon` mixed in."""
    import stable_baselines3 as sb3

    base = {"ppo": sb3.PPO, "dqn": sb3.DQN, "sac": sb3.SAC, "td3": sb3.TD3}.get(algo)
    if base is None:
        import sb3_contrib

        base = {"trpo": sb3_contrib.TRPO}[algo]
    return _HORIZON_CLASSES.setdefault(algo, type(f"Horizon{base.__name__}", (Horizon, base), {}))


class RawObservations(gym.Wrapper[Any, Any, Any, Any]):
    """A run's learner environment seen through its raw observations (its counting and seeds unchanged)."""

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        self.learner_env: Any = env
        """The run's learner environment (it keeps the raw observation it counts from)."""
        self.observation_space = env.env.observation_space

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        _, info = self.env.reset(seed=seed, options=options)
        return self.learner_env.raw_obs, info

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        _, reward, terminated, truncated, info = self.env.step(action)
        return self.learner_env.raw_obs, reward, terminated, truncated, info


def _maker(env: Any) -> Any:
    """A ``DummyVecEnv`` environment function giving ``env`` seen through its raw observations."""
    return lambda: RawObservations(env)


def _action_noise(kind: str, std: float, n: int) -> Any:
    """The zoo's action noise (``noise_type``, ``noise_std``) over ``n`` action dimensions, as its exp_manager
    builds it."""
    from stable_baselines3.common.noise import NormalActionNoise, OrnsteinUhlenbeckActionNoise

    cls = NormalActionNoise if "normal" in kind else OrnsteinUhlenbeckActionNoise
    return cls(mean=np.zeros(n), sigma=float(std) * np.ones(n))


_NORM_ARRAYS = ("obs_rms.mean", "obs_rms.var", "ret_rms.mean", "ret_rms.var", "returns", "old_reward")


class PeerLearner:
    """The library learner over ``envs`` (the run's learner environment first, then its siblings)."""

    def __init__(self, envs: list[Any], hyper: Hyper, algo: str, seed: int, horizon: int, chunk: int) -> None:
        import torch
        from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

        torch.set_num_threads(1)
        self.envs, self.hyper, self.algo, self.chunk = envs, hyper, algo, int(chunk)
        # a VecEnv as given: SB3 would wrap a plain environment in a Monitor, which refuses a resumed learner's step
        venv: Any = DummyVecEnv([_maker(e) for e in envs])
        if hyper.normalize is not None:
            venv = VecNormalize(venv, **hyper.normalize)
        kwargs = dict(hyper.kwargs)
        if hyper.noise is not None:
            kwargs["action_noise"] = _action_noise(*hyper.noise, int(np.prod(venv.action_space.shape)))
        self.model: Any = algo_class(algo)(hyper.policy, venv, seed=seed, verbose=0, device="cpu", **kwargs)
        self.model.horizon = int(horizon)
        self.updates = 0

    @property
    def steps(self) -> int:
        """Environment steps the learner has taken (all its environments)."""
        return int(self.model.num_timesteps)

    def update(self) -> None:
        """One ``learn`` call of :attr:`chunk` steps (on-policy: whole rollouts)."""
        self.model.learn(total_timesteps=self.chunk, reset_num_timesteps=False, progress_bar=False)
        self.updates += 1

    def table(self) -> np.ndarray:
        """A peer has no table (its policy is the network): an empty array."""
        return np.zeros(0, dtype=np.int64)

    def policy_arrays(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """The network's facts and arrays, as :class:`~.network_policy.NetworkPolicy` rebuilds it."""
        from .network_policy import POLICY_CLASSES, action_facts, space_facts

        m = self.model
        name = type(m.policy).__name__
        if name not in POLICY_CLASSES:
            raise ValueError(f"no policy file for SB3 policy class {name}")
        facts, arrays = space_facts(m.observation_space)
        acts, bounds = action_facts(m.action_space)
        text = self.hyper.raw.get("policy_kwargs")
        facts.update(algo=self.algo, policy_class=name, **acts, use_sde=bool(m.use_sde),
                     policy_kwargs=text if isinstance(text, str) else None, normalize=None)
        arrays.update(bounds)
        arrays.update({f"policy.{k}": v.detach().cpu().numpy().copy() for k, v in m.policy.state_dict().items()})
        norm = m.get_vec_normalize_env()
        if norm is not None:
            facts["normalize"] = {"norm_obs": bool(norm.norm_obs), "clip_obs": float(norm.clip_obs),
                                  "epsilon": float(norm.epsilon)}
            arrays.update({"obs_rms.mean": np.asarray(norm.obs_rms.mean), "obs_rms.var": np.asarray(norm.obs_rms.var)})
        return facts, arrays

    # ------------------------------------------------------------------ state (modes.base.Learner)
    def state_dict(self) -> dict[str, Any]:
        """What decides the next update (see the module doc)."""
        from ..lm.state import module_state, optimizer_state, rng_state

        m = self.model
        optimizer = getattr(m.policy, "optimizer", None)
        state: dict[str, Any] = {
            "algo": self.algo, "updates": self.updates, "num_timesteps": int(m.num_timesteps),
            "n_updates": int(m._n_updates), "progress_remaining": float(m._current_progress_remaining),
            "episode_num": int(m._episode_num),
            "last_obs": None if m._last_obs is None else np.asarray(m._last_obs),
            "last_episode_starts": None if m._last_obs is None else np.asarray(m._last_episode_starts),
            "policy": module_state(m.policy), "optimizer": None if optimizer is None else optimizer_state(optimizer),
            "rng": rng_state(), "siblings": [e.state_dict() for e in self.envs[1:]], "normalize": None}
        norm = m.get_vec_normalize_env()
        if norm is not None:
            values = (norm.obs_rms.mean, norm.obs_rms.var, norm.ret_rms.mean, norm.ret_rms.var, norm.returns,
                      norm.old_reward)
            old = getattr(norm, "old_obs", None)  # set by the first reset
            state["normalize"] = {"arrays": {k: np.asarray(v) for k, v in zip(_NORM_ARRAYS, values, strict=True)},
                                  "obs_count": float(norm.obs_rms.count), "ret_count": float(norm.ret_rms.count),
                                  "old_obs": None if old is None else np.asarray(old)}
            if getattr(m, "_last_original_obs", None) is not None:
                state["last_original_obs"] = np.asarray(m._last_original_obs)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Back to ``state``; one of another algorithm or number of environments raises ``ValueError``."""
        from ..lm.state import load_module_state, load_optimizer_state, load_rng_state

        if state.get("algo") != self.algo or len(state["siblings"]) != len(self.envs) - 1:
            raise ValueError(f"the learner was saved as {state.get('algo')} over {len(state['siblings']) + 1} "
                             f"environments, this one is {self.algo} over {len(self.envs)}")
        for env, saved in zip(self.envs[1:], state["siblings"], strict=True):
            env.load_state_dict(saved)
        m = self.model
        load_module_state(m.policy, state["policy"])
        if state["optimizer"] is not None:
            load_optimizer_state(m.policy.optimizer, state["optimizer"])
        self.updates = int(state["updates"])
        m.num_timesteps, m._n_updates = int(state["num_timesteps"]), int(state["n_updates"])
        m._current_progress_remaining = float(state["progress_remaining"])
        m._episode_num = int(state["episode_num"])
        if state["last_obs"] is not None:
            m._last_obs = np.asarray(state["last_obs"])
            m._last_episode_starts = np.asarray(state["last_episode_starts"], dtype=bool)
        norm = m.get_vec_normalize_env()
        if norm is not None and state["normalize"] is not None:
            a = state["normalize"]["arrays"]
            norm.obs_rms.mean, norm.obs_rms.var = np.array(a["obs_rms.mean"]), np.array(a["obs_rms.var"])
            norm.ret_rms.mean, norm.ret_rms.var = np.array(a["ret_rms.mean"]), np.array(a["ret_rms.var"])
            norm.obs_rms.count, norm.ret_rms.count = state["normalize"]["obs_count"], state["normalize"]["ret_count"]
            norm.returns, norm.old_reward = np.array(a["returns"]), np.array(a["old_reward"])
            if state["normalize"]["old_obs"] is not None:
                norm.old_obs = np.array(state["normalize"]["old_obs"])
            if "last_original_obs" in state:
                m._last_original_obs = np.asarray(state["last_original_obs"])
        load_rng_state(state["rng"])
