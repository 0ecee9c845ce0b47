"""A peer's trained network as a policy: what ``evaluate`` runs, and what the run measures its held-out seeds with.

A :class:`NetworkPolicy` is the library's policy network (SB3's ``ActorCriticPolicy`` for PPO and TRPO, ``DQNPolicy``
for DQN, ``SACPolicy`` for SAC, ``TD3Policy`` for TD3) rebuilt from its facts and its tensors: the facts
(:attr:`NetworkPolicy.facts`, JSON: the algorithm, the policy class, the zoo's ``policy_kwargs`` text, whether it uses
gSDE, the observation space's kind and shape, the action space (``action_space``: ``box`` with its dtype, else the
number of action indices), the ``VecNormalize`` settings) and the arrays (the network's tensors under ``policy.``, the
spaces' bounds under ``space.`` and ``action.``, the normalisation statistics under ``obs_rms.``), written as a JSON
file and a safetensors file (never a pickle). The run measures its held-out seeds with a policy rebuilt from the very
arrays it writes, so ``evaluate`` on the run reproduces ``summary.json``.

Actions are deterministic, on the observation as the environment gives it, normalised as ``VecNormalize`` does with
the statistics frozen at the time of saving: on action indices the most probable action (DQN's greedy one); on a
``Box`` (``native_actions``) the Gaussian policy's mean (gSDE's too) clipped to the space, or SAC's and TD3's squashed
mean rescaled to it, as SB3's ``predict`` gives them, handed to the environment as they are. A policy file without
``action_space`` (written before native actions) acts on action indices.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import PolicyFileError

__all__ = ["NetworkPolicy", "POLICY_CLASSES", "action_facts", "space_facts"]

POLICY_CLASSES = {"ActorCriticPolicy": "stable_baselines3.common.policies:ActorCriticPolicy",
                  "DQNPolicy": "stable_baselines3.dqn.policies:DQNPolicy",
                  "SACPolicy": "stable_baselines3.sac.policies:SACPolicy",
                  "TD3Policy": "stable_baselines3.td3.policies:TD3Policy"}
"""The library's policy classes a policy file may name (nothing else is ever imported from one)."""


def _space(what: str, kind: object, facts: dict[str, Any], arrays: dict[str, np.ndarray],
           keys: tuple[str, str, str]) -> Any:
    """A policy file's ``what`` (observation or action) space: ``Discrete`` of ``facts[n_key]``, or a ``Box`` of the
    bounds ``arrays[prefix.low|high]`` and ``facts[dtype_key]`` (``keys``: n_key, dtype_key, prefix)."""
    import gymnasium as gym

    n_key, dtype_key, prefix = keys
    if kind == "discrete":
        return gym.spaces.Discrete(int(facts[n_key]))
    if kind == "box":
        return gym.spaces.Box(np.asarray(arrays[f"{prefix}.low"]), np.asarray(arrays[f"{prefix}.high"]),
                              dtype=np.dtype(str(facts[dtype_key])).type)
    raise PolicyFileError(f"a peer policy with {what} space {kind!r}; accepted: box, discrete")


def action_facts(space: Any) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """An action space's facts and bounds: a ``Box`` (native actions), else the number of action indices."""
    import gymnasium as gym

    if isinstance(space, gym.spaces.Box):
        return ({"action_space": "box", "action_dtype": str(space.dtype)},
                {"action.low": np.asarray(space.low), "action.high": np.asarray(space.high)})
    return {"action_space": "discrete", "n_actions": int(space.n)}, {}


def space_facts(space: Any) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """An observation space's facts and bounds (a ``Box`` or a ``Discrete`` starting at 0)."""
    import gymnasium as gym

    if isinstance(space, gym.spaces.Discrete) and int(space.start) == 0:
        return {"observation_space": "discrete", "observation_n": int(space.n)}, {}
    if isinstance(space, gym.spaces.Box):
        return ({"observation_space": "box", "observation_dtype": str(space.dtype)},
                {"space.low": np.asarray(space.low), "space.high": np.asarray(space.high)})
    raise PolicyFileError(f"a peer acts on Box or Discrete observations, not {space}")


class NetworkPolicy:
    """The network rebuilt from ``facts`` and ``arrays`` (see the module doc); ``act`` maps raw observations to action
    indices, or to the environment's own actions (:attr:`native_actions`)."""

    def __init__(self, facts: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        import importlib

        import torch

        from .zoo import parse_kwargs

        self.facts, self.arrays = dict(facts), {k: np.asarray(v) for k, v in arrays.items()}
        name = facts.get("policy_class")
        if name not in POLICY_CLASSES:
            raise PolicyFileError(f"a peer policy of class {name!r}; accepted: {', '.join(POLICY_CLASSES)}")
        module, attr = POLICY_CLASSES[str(name)].split(":")
        cls = getattr(importlib.import_module(module), attr)
        text = facts.get("policy_kwargs")
        kwargs = parse_kwargs(text) if isinstance(text, str) and text.strip() else {}
        if facts.get("use_sde"):  # the algorithm's own argument to its policy, beside the zoo's policy_kwargs
            kwargs["use_sde"] = True
        torch.set_num_threads(1)
        self.native_actions = facts.get("action_space") == "box"
        """``act`` gives the environment's own actions (:class:`~llm_policy_gen.policy.ActsNatively`)."""
        with torch.random.fork_rng(devices=[]):  # building draws initial weights: the caller's streams stay
            self.net = cls(_space("observation", facts.get("observation_space"), facts, self.arrays,
                                  ("observation_n", "observation_dtype", "space")),
                           _space("action", facts.get("action_space", "discrete"), facts, self.arrays,
                                  ("n_actions", "action_dtype", "action")), lambda _: 0.0, **kwargs)
        weights = {k[len("policy."):]: torch.from_numpy(np.array(v, copy=True)) for k, v in self.arrays.items()
                   if k.startswith("policy.")}
        try:
            self.net.load_state_dict(weights, strict=True)
        except RuntimeError as exc:
            raise PolicyFileError(f"the peer policy's tensors do not fit its network: {str(exc).splitlines()[0]}") \
                from None
        self.net.set_training_mode(False)
        self.norm = facts.get("normalize")

    def _normalised(self, obs: np.ndarray) -> np.ndarray:
        """As ``VecNormalize.normalize_obs`` (frozen statistics), float32 as it hands them on."""
        if not isinstance(self.norm, dict) or not self.norm.get("norm_obs", True):
            return obs
        mean, var = self.arrays["obs_rms.mean"], self.arrays["obs_rms.var"]
        clip, eps = float(self.norm["clip_obs"]), float(self.norm["epsilon"])
        return np.clip((obs - mean) / np.sqrt(var + eps), -clip, clip).astype(np.float32)

    def act(self, obs: np.ndarray) -> np.ndarray:
        """Deterministic actions for a batch of raw observations: action indices, or with :attr:`native_actions`
        the environment's own actions (one row each, as SB3's ``predict`` gives them)."""
        actions, _ = self.net.predict(self._normalised(np.asarray(obs)), deterministic=True)
        if self.native_actions:
            return np.asarray(actions).reshape(len(obs), *self.net.action_space.shape)
        return np.asarray(actions, dtype=np.int64).reshape(-1)

    # ------------------------------------------------------------------ files
    def to_bytes(self) -> bytes:
        """The arrays as safetensors."""
        from safetensors.numpy import save

        return bytes(save({k: np.ascontiguousarray(v) for k, v in self.arrays.items()}))

    @classmethod
    def from_bytes(cls, facts: dict[str, Any], data: bytes, where: str) -> NetworkPolicy:
        """The policy from its facts and its safetensors bytes; what cannot be read is one line naming ``where``."""
        from safetensors.numpy import load

        try:
            arrays = load(data)
        except Exception as exc:  # safetensors raises its own error types for a damaged file
            raise PolicyFileError(f"{where} is not a readable safetensors file ({type(exc).__name__})") from None
        try:
            return cls(facts, arrays)
        except (KeyError, TypeError, ValueError) as exc:
            raise PolicyFileError(f"{where}: the peer policy does not fit its facts ({exc})") from None
