"""The learner: SB3 PPO or sb3-contrib TRPO over a frozen features table, and its read-out table.

The observation is the discretized state's index (the run's learner environment,
:mod:`llm_policy_gen.run.learner_env`); SB3 turns a ``Discrete`` observation into a one-hot
vector, and :class:`TableFeatures` (an SB3 features extractor) looks the state's row up in the frozen features table
(a module buffer, never trained: not a frozen ``nn.Embedding``, whose weight sb3-contrib's TRPO would try to
differentiate like every parameter). The head is SB3's own MLP policy over those features (``net_arch`` for the
policy and the value function). PPO and TRPO are the libraries' (STYLE 29): this module writes only the extractor, the
hyperparameters and the read-out.

One :meth:`TableLearner.update` is one rollout of ``n_steps`` environment steps and its optimisation (``learn`` with
``reset_num_timesteps=False``, so the environment goes on where the last rollout left it). :meth:`TableLearner.table`
reads the policy out per state: the most probable action of each state's features (the deterministic policy), an
array of action indices like every other mode's table.

**State** (:meth:`TableLearner.state_dict`, the :class:`~llm_policy_gen.modes.base.Learner` protocol): the settings,
the head's tensors, Adam's moments, the random streams it draws from (actions sampled from torch's generator, PPO's
minibatches from numpy's), SB3's counters (``num_timesteps``, ``_n_updates``) and its last observation, as arrays and
JSON values (:mod:`.state`), never SB3's cloudpickled ``.zip``. Saved after an update, it gives a learner whose next
update is the uninterrupted one's, bit for bit (the rollout buffer is refilled at every update, so it holds nothing
between them).

The head runs on one torch thread: with two, under contention on a shared 2-core machine, 16k PPO steps took
150-250 s instead of 5-9 s (measured while filing the issue).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np

from ..storage.sizes import Need

__all__ = ["Algorithm", "ALGORITHMS", "LearnerSettings", "TableLearner", "READOUT_BATCH_BYTES", "ROLLOUT_STEP_BYTES",
           "PARAMETER_BYTES"]

READOUT_BATCH_BYTES = 64 * 2**20
"""The read-out's batches of states: SB3 one-hot encodes a ``Discrete`` observation, so a batch of ``b`` states of
``n`` takes ``4 b n`` bytes; a batch is at most this large (every state at once up to 4,096 states)."""
ROLLOUT_STEP_BYTES = 64
"""Bytes per step of SB3's rollout buffer: eight float32 arrays (observation, action, reward, return, value, log
probability, advantage, episode start) and the flattened copy the optimisation reads."""
PARAMETER_BYTES = 16
"""Bytes per parameter of the head: float32 weights, their gradients and Adam's two moments."""

Algorithm = Literal["ppo", "trpo"]
ALGORITHMS: tuple[Algorithm, ...] = ("ppo", "trpo")


@dataclass(frozen=True)
class LearnerSettings:
    """The learner's hyperparameters (the rest are the library's defaults, named in :meth:`describe`)."""

    algorithm: Algorithm = "ppo"
    n_steps: int = 256
    """Environment steps per rollout (one update per rollout)."""
    batch_size: int = 64
    """PPO: minibatch size; TRPO: the value function's minibatch size."""
    n_epochs: int = 10
    """PPO: passes over each rollout; TRPO: value-function updates per rollout (``n_critic_updates``)."""
    learning_rate: float = 3e-4
    """PPO: Adam's step size; TRPO: the value function's (the policy step is the KL-bounded natural gradient)."""
    gamma: float = 0.99
    gae_lambda: float = 0.95
    ent_coef: float = 0.0
    """PPO only (TRPO has no entropy bonus)."""
    target_kl: float = 0.01
    """TRPO only: the trust region's KL bound."""
    net_arch: list[int] = field(default_factory=lambda: [64, 64])
    device: str = "cpu"
    seed: int = 0

    def algorithm_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of the library's constructor."""
        common = {"n_steps": self.n_steps, "batch_size": self.batch_size, "learning_rate": self.learning_rate,
                  "gamma": self.gamma, "gae_lambda": self.gae_lambda, "seed": self.seed, "device": self.device}
        if self.algorithm == "ppo":
            return {**common, "n_epochs": self.n_epochs, "ent_coef": self.ent_coef}
        return {**common, "n_critic_updates": self.n_epochs, "target_kl": self.target_kl}

    def memory_needs(self, n_states: int, n_actions: int, width: int, actor_mlp: bool = True) -> list[Need]:
        """What the learner's arrays take at least (:mod:`llm_policy_gen.sizes`): the rollout buffer, a minibatch's
        one-hot states and the head's parameters over features of ``width`` (``actor_mlp``: the policy has its own
        MLP beside the value function's, as the features head has)."""
        layers = [int(width), *map(int, self.net_arch)]
        mlp = sum((a + 1) * b for a, b in zip(layers, layers[1:], strict=False))
        params = mlp * (2 if actor_mlp else 1) + (layers[-1] + 1) * (int(n_actions) + 1)
        batch = min(int(self.batch_size), int(self.n_steps))
        arch = ",".join(map(str, self.net_arch))
        return [(f"the rollout buffer of --lm-n-steps {self.n_steps:,} ({ROLLOUT_STEP_BYTES} bytes a step)",
                 int(self.n_steps) * ROLLOUT_STEP_BYTES),
                (f"a minibatch of {batch:,} states (--lm-batch-size): one-hot over {n_states:,} states, and the "
                 "head's activations", batch * (int(n_states) * 4 + sum(layers[1:]) * 8)),
                (f"the head's {params:,} parameters (--lm-net-arch {arch} over {width:,} features; "
                 f"{PARAMETER_BYTES} bytes each)", params * PARAMETER_BYTES)]

    def describe(self) -> dict[str, Any]:
        """What ``config.json`` records: these settings, the library and its version."""
        import importlib.metadata as md

        lib = "stable-baselines3" if self.algorithm == "ppo" else "sb3-contrib"
        name = "PPO" if self.algorithm == "ppo" else "TRPO"
        return {**asdict(self), "library": f"{lib} {md.version(lib)}", "class": name,
                "policy": f"MlpPolicy (tanh, net_arch pi={self.net_arch} vf={self.net_arch}) over frozen features",
                "others": "the library's defaults", "torch_threads": 1}


def _extractor_class() -> type:
    """:class:`TableFeatures`, defined when torch is imported (the base install has no torch)."""
    import torch
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor

    class TableFeatures(BaseFeaturesExtractor):  # type: ignore[misc]
        """A one-hot state in, the state's frozen row of the features table out."""

        def __init__(self, observation_space: Any, table: np.ndarray) -> None:
            t = torch.as_tensor(np.asarray(table, dtype=np.float32))
            super().__init__(observation_space, features_dim=int(t.shape[1]))
            self.register_buffer("table", t)  # a buffer, not a frozen parameter: TRPO differentiates every parameter

        def forward(self, observations: torch.Tensor) -> torch.Tensor:
            table: torch.Tensor = self.table  # type: ignore[assignment]  # a registered buffer
            return table[observations.reshape(observations.shape[0], -1).argmax(dim=1)]

    return TableFeatures


class TableLearner:
    """An SB3 algorithm whose head reads a frozen features table indexed by the discretized state."""

    def __init__(self, env: Any, features: np.ndarray, settings: LearnerSettings) -> None:
        import torch

        torch.set_num_threads(1)
        self.settings = settings
        self.features = np.asarray(features, dtype=np.float32)
        self.n_states = int(self.features.shape[0])
        policy, policy_kwargs = self._policy()
        kwargs = settings.algorithm_kwargs()
        from stable_baselines3.common.vec_env import DummyVecEnv

        # SB3 would wrap a plain environment in a Monitor, whose 'needs reset' flag refuses a resumed learner's step
        venv = DummyVecEnv([lambda: env])
        if settings.algorithm == "ppo":
            from stable_baselines3 import PPO

            self.model: Any = PPO(policy, venv, policy_kwargs=policy_kwargs, verbose=0, **kwargs)
        else:
            from sb3_contrib import TRPO

            self.model = TRPO(policy, venv, policy_kwargs=policy_kwargs, verbose=0, **kwargs)
        self.updates = 0

    def _policy(self) -> tuple[Any, dict[str, Any]]:
        """The SB3 policy (a name or a class) and its keyword arguments: the MLP over the features table."""
        return "MlpPolicy", {"features_extractor_class": _extractor_class(),
                             "features_extractor_kwargs": {"table": self.features},
                             "net_arch": {"pi": list(self.settings.net_arch), "vf": list(self.settings.net_arch)}}

    @property
    def steps(self) -> int:
        """Environment steps the learner has taken."""
        return int(self.model.num_timesteps)

    def update(self) -> None:
        """One rollout of ``n_steps`` and its optimisation."""
        self.model.learn(total_timesteps=self.settings.n_steps, reset_num_timesteps=False, progress_bar=False)
        self.updates += 1

    def probabilities(self) -> np.ndarray:
        """(n_states, n_actions) action probabilities of every state's features, in batches of states (SB3 one-hot
        encodes them: all at once, a 40,000-state table would take 6.4 GB; :data:`READOUT_BATCH_BYTES`)."""
        import torch

        policy = self.model.policy
        parts = []
        for lo in range(0, self.n_states, self.readout_batch):
            obs, _ = policy.obs_to_tensor(np.arange(lo, min(lo + self.readout_batch, self.n_states)))
            with torch.no_grad():
                parts.append(np.asarray(policy.get_distribution(obs).distribution.probs.cpu().numpy(),
                                        dtype=np.float64))
        return np.concatenate(parts)

    @property
    def readout_batch(self) -> int:
        """States per batch of the read-out: every state at once while their one-hot vectors fit in
        :data:`READOUT_BATCH_BYTES`, else that much (a multiple of 16, the LoRA head's chunk of states)."""
        rows = READOUT_BATCH_BYTES // (4 * max(1, self.n_states))
        return self.n_states if rows >= self.n_states else max(16, rows - rows % 16)

    def table(self) -> np.ndarray:
        """The read-out table: each state's most probable action (ties: the lowest index)."""
        return np.argmax(self.probabilities(), axis=1).astype(np.int64)

    # ------------------------------------------------------------------ state (modes.base.Learner)
    def _frozen(self) -> set[str]:
        """The policy's buffers that are the frozen features table (rebuilt from the model at every start)."""
        return {n for n, _ in self.model.policy.named_buffers() if n.rsplit(".", 1)[-1] == "table"}

    def state_dict(self) -> dict[str, Any]:
        """What decides the next update, as arrays and JSON values (see the module doc): the settings, the head's
        tensors and the optimiser's moments, the random streams, and the library's counters and last observation
        (an update that ended inside an episode goes on with it)."""
        from .state import module_state, optimizer_state, rng_state

        m = self.model
        return {"settings": asdict(self.settings), "updates": self.updates, "num_timesteps": int(m.num_timesteps),
                "n_updates": int(m._n_updates), "progress_remaining": float(m._current_progress_remaining),
                "last_obs": None if m._last_obs is None else np.asarray(m._last_obs),
                "last_episode_starts": None if m._last_obs is None else np.asarray(m._last_episode_starts),
                "policy": module_state(m.policy, self._frozen()), "optimizer": optimizer_state(m.policy.optimizer),
                "rng": rng_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Back to ``state``; one saved with other settings raises ``ValueError``."""
        from .state import load_module_state, load_optimizer_state, load_rng_state

        saved, own = state["settings"], asdict(self.settings)
        if saved != own:
            differ = sorted(k for k in set(saved) | set(own) if saved.get(k) != own.get(k))
            raise ValueError(f"the learner was saved with other settings ({', '.join(differ)})")
        m = self.model
        load_module_state(m.policy, state["policy"])
        load_optimizer_state(m.policy.optimizer, state["optimizer"])
        self.updates = int(state["updates"])
        m.num_timesteps = int(state["num_timesteps"])
        m._n_updates = int(state["n_updates"])
        m._current_progress_remaining = float(state["progress_remaining"])
        if state["last_obs"] is not None:
            m._last_obs = np.asarray(state["last_obs"])
            m._last_episode_starts = np.asarray(state["last_episode_starts"], dtype=bool)
        load_rng_state(state["rng"])
