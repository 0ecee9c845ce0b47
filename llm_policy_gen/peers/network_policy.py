"""A peer's trained network as a policy: what ``evaluate`` runs, and what the run measures its held-out seeds with.

A :class:`NetworkPolicy` is the library's policy network (SB3's ``ActorCriticPolicy`` for PPO and TRPO, ``DQNPolicy``
for DQN) rebuilt from its facts and its tensors: the facts (:attr:`NetworkPolicy.facts`, JSON: the algorithm, the
policy class, the zoo's ``policy_kwargs`` text, the observation space's kind and shape, the number of actions, the
``VecNormalize`` settings) and the arrays (the network's tensors under ``policy.``, the observation space's bounds and
the normalisation statistics under ``obs_rms.``), written as a JSON file and a safetensors file (never a pickle). The
run measures its held-out seeds with a policy rebuilt from the very arrays it writes, so ``evaluate`` on the run
reproduces ``summary.json``.

Actions are deterministic (the most probable action; DQN's greedy one), on the observation as the environment gives
it, normalised as ``VecNormalize`` does with the statistics frozen at the time of saving.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import PolicyFileError

__all__ = ["NetworkPolicy", "POLICY_CLASSES"]

POLICY_CLASSES = {"ActorCriticPolicy": "stable_baselines3.common.policies:ActorCriticPolicy",
                  "DQNPolicy": "stable_baselines3.dqn.policies:DQNPolicy"}
"""The library's policy classes a policy file may name (nothing else is ever imported from one)."""


def _space(facts: dict[str, Any], arrays: dict[str, np.ndarray]) -> Any:
    import gymnasium as gym

    kind = facts.get("observation_space")
    if kind == "discrete":
        return gym.spaces.Discrete(int(facts["observation_n"]))
    if kind == "box":
        return gym.spaces.Box(np.asarray(arrays["space.low"]), np.asarray(arrays["space.high"]),
                              dtype=np.dtype(str(facts["observation_dtype"])).type)
    raise PolicyFileError(f"a peer policy with observation space {kind!r}; accepted: box, discrete")


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
    indices."""

    def __init__(self, facts: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        import importlib

        import gymnasium as gym
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
        torch.set_num_threads(1)
        with torch.random.fork_rng(devices=[]):  # building draws initial weights: the caller's streams stay
            self.net = cls(_space(facts, self.arrays), gym.spaces.Discrete(int(facts["n_actions"])),
                           lambda _: 0.0, **kwargs)
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
        """Deterministic action indices for a batch of raw observations."""
        actions, _ = self.net.predict(self._normalised(np.asarray(obs)), deterministic=True)
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
