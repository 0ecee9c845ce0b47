"""The scores head (``--lm-head scores``) as an SB3 policy, over a frozen model or one fine-tuned with LoRA.

**The actor.** The policy's logits in state ``s`` are the model's length-normalised log-probabilities of each
action's words after the state's prompt (:mod:`.scores`), plus a learned bias per action (zero at the start, so a
run's first read-out table is the model's zero-shot table). No bias per state: added to every action's logit alike,
it cancels in the softmax. No bias per state and action either: that would be a whole table of logits, a tabular
softmax policy merely started at the model's prior, which the one-hot control of ``--lm-head features`` already
measures; the model's own log-probabilities stay the policy, and only LoRA (``--lm-lora R``) changes them per state.

* :class:`FrozenScores` -- the frozen model's scores, computed once per state and cached (:class:`~.scores.
  ActionScorer`), as a buffer; only the bias is trained.
* :class:`LoraScores` -- the model with LoRA adapters (``peft``, rank ``R`` on the attention's ``q_proj`` and
  ``v_proj``): every forward pass with gradients runs the model on the batch's distinct states (all their actions
  over the task's shared prefix, :func:`~.scores.state_logprobs`), so PPO's loss trains the adapters and the bias
  together. During a rollout (no gradients, weights fixed) a state's logits are computed once and kept until the
  policy's mode changes (SB3 switches it before each rollout and each optimisation).

**The critic** is SB3's MLP over the features table of ``--lm-features`` (the frozen model's encodings, one-hot or
random), as in the features head: TWOSOME puts its value head on the fine-tuned model's last hidden state; here the
value function reads the frozen encodings, so a value step never needs the model.

**SB3 expresses it** (STYLE 29): a features extractor gives ``[features row, state index]``, a custom MLP extractor
sends the index to the actor and the features to the critic's MLP, and the action net is the head above. PPO's
clipped loss and Adam train the head's parameters with the critic's; sb3-contrib's TRPO differentiates every
parameter of the policy, frozen model weights included, so ``--lm-lora`` runs with PPO only.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .agent import LearnerSettings, TableLearner
from .scores import ScoreNorm, ScoringTask, normalise, prefix_states, state_logprobs

__all__ = ["scores_policy_kwargs", "frozen_scores_head", "lora_scores_head", "ScoresLearner"]


def _classes() -> dict[str, type]:
    """The torch classes, defined when torch is imported (the base install has no torch)."""
    import torch
    from stable_baselines3.common.policies import ActorCriticPolicy
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
    from torch import nn

    class StateFeatures(BaseFeaturesExtractor):  # type: ignore[misc]
        """A one-hot state in; its frozen features row and its index out."""

        def __init__(self, observation_space: Any, table: np.ndarray) -> None:
            t = torch.as_tensor(np.asarray(table, dtype=np.float32))
            super().__init__(observation_space, features_dim=int(t.shape[1]) + 1)
            self.register_buffer("table", t)

        def forward(self, observations: torch.Tensor) -> torch.Tensor:
            table: torch.Tensor = self.table  # type: ignore[assignment]  # a registered buffer
            idx = observations.reshape(observations.shape[0], -1).argmax(dim=1)
            return torch.cat([table[idx], idx.to(table.dtype).unsqueeze(1)], dim=1)

    class SplitExtractor(nn.Module):
        """The actor gets the state index; the critic an MLP over the features (named ``value_net``)."""

        def __init__(self, width: int, net_arch: list[int], activation: type[nn.Module]) -> None:
            super().__init__()
            layers: list[nn.Module] = []
            last = width
            for n in net_arch:
                layers += [nn.Linear(last, n), activation()]
                last = n
            self.value_net = nn.Sequential(*layers)
            self.latent_dim_pi = 1
            self.latent_dim_vf = last

        def forward(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return self.forward_actor(features), self.forward_critic(features)

        def forward_actor(self, features: torch.Tensor) -> torch.Tensor:
            return features[:, -1:]

        def forward_critic(self, features: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = self.value_net(features[:, :-1])
            return out

    class ScoresPolicy(ActorCriticPolicy):  # type: ignore[misc]
        """SB3's actor-critic policy with the scores head as its action net."""

        def __init__(self, *args: Any, head: nn.Module, **kwargs: Any) -> None:
            self._head_source = lambda: head  # a plain attribute: nn.Module refuses a module before its __init__
            super().__init__(*args, **kwargs)

        def _build_mlp_extractor(self) -> None:
            vf = self.net_arch["vf"] if isinstance(self.net_arch, dict) else list(self.net_arch)
            self.mlp_extractor = SplitExtractor(  # type: ignore[assignment]  # SB3 types it as its own MlpExtractor
                self.features_dim - 1, list(vf), self.activation_fn)

        def _build(self, lr_schedule: Any) -> None:
            super()._build(lr_schedule)
            self.action_net = self._head_source()
            self.optimizer = self.optimizer_class(  # type: ignore[call-arg]  # as SB3's own _build does
                self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs)

        def set_training_mode(self, mode: bool) -> None:
            super().set_training_mode(mode)
            self.action_net.forget()  # type: ignore[operator]  # the scores head's own method

    class FrozenScores(nn.Module):
        """Fixed scores (a buffer) plus a learned bias per action."""

        def __init__(self, scores: np.ndarray) -> None:
            super().__init__()
            s = torch.as_tensor(np.asarray(scores, dtype=np.float32))
            self.register_buffer("scores", s)
            self.bias = nn.Parameter(torch.zeros(int(s.shape[1])))

        def forward(self, latent: torch.Tensor) -> torch.Tensor:
            scores: torch.Tensor = self.scores  # type: ignore[assignment]  # a registered buffer
            return scores[latent[:, 0].long()] + self.bias

        def forget(self) -> None:
            pass

    class LoraScores(nn.Module):
        """The LoRA-adapted model's scores, computed for the batch's distinct states, plus a bias per action."""

        def __init__(self, model: Any, task: ScoringTask, words: np.ndarray, norm: ScoreNorm, device: str,
                     chunk: int = 16) -> None:
            super().__init__()
            self.model = model
            self.task = task
            self.norm: ScoreNorm = norm
            self.device = device
            self.chunk = chunk
            self.register_buffer("words", torch.as_tensor(np.asarray(words, dtype=np.float32)))
            self.bias = nn.Parameter(torch.zeros(task.n_actions))
            self.memo: dict[int, torch.Tensor] = {}
            self.model_passes = 0
            """Batches of states run through the model (with or without gradients)."""

        def scores_of(self, states: list[int]) -> torch.Tensor:
            """(len(states), n_actions) normalised scores, in chunks of ``chunk`` states over one prefix pass."""
            prefix = prefix_states(self.model, self.task, self.device)
            parts = []
            for lo in range(0, len(states), self.chunk):
                sums, counts = state_logprobs(self.model, self.task, states[lo:lo + self.chunk], prefix, self.device)
                self.model_passes += 1
                parts.append(normalise(sums, counts, self.words, self.norm))
            return torch.cat(parts).float()

        def forward(self, latent: torch.Tensor) -> torch.Tensor:
            idx = latent[:, 0].long()
            if torch.is_grad_enabled():
                self.memo.clear()
                uniq, inverse = torch.unique(idx, return_inverse=True)
                return self.scores_of([int(s) for s in uniq.tolist()])[inverse] + self.bias
            missing = sorted({int(s) for s in idx.tolist()} - set(self.memo))
            if missing:
                for s, row in zip(missing, self.scores_of(missing), strict=True):
                    self.memo[s] = row
            return torch.stack([self.memo[int(s)] for s in idx.tolist()]) + self.bias

        def forget(self) -> None:
            self.memo.clear()

    return {"StateFeatures": StateFeatures, "ScoresPolicy": ScoresPolicy, "FrozenScores": FrozenScores,
            "LoraScores": LoraScores}


def scores_policy_kwargs(features: np.ndarray, net_arch: list[int], head: Any) -> dict[str, Any]:
    """The policy's keyword arguments: the critic's features table and MLP, and the actor's head."""
    return {"features_extractor_class": _classes()["StateFeatures"],
            "features_extractor_kwargs": {"table": np.asarray(features, dtype=np.float32)},
            "net_arch": {"pi": [], "vf": list(net_arch)}, "head": head}


def frozen_scores_head(scores: np.ndarray) -> Any:
    """The head over fixed (n_states, n_actions) scores: the zero-shot logits plus a learned bias."""
    return _classes()["FrozenScores"](scores)


def lora_scores_head(model: Any, task: ScoringTask, words: np.ndarray, norm: ScoreNorm, device: str = "cpu") -> Any:
    """The head over a LoRA-adapted model (see :mod:`.lora`)."""
    return _classes()["LoraScores"](model, task, words, norm, device)


class ScoresLearner(TableLearner):
    """The SB3 learner with the scores head as its actor (see the module doc)."""

    def __init__(self, env: Any, features: np.ndarray, settings: LearnerSettings, head: Any) -> None:
        self.head = head
        super().__init__(env, features, settings)

    def _policy(self) -> tuple[Any, dict[str, Any]]:
        return _classes()["ScoresPolicy"], scores_policy_kwargs(self.features, list(self.settings.net_arch),
                                                                self.head)

    def probabilities(self) -> np.ndarray:
        self.model.policy.set_training_mode(False)  # a rollout's logits memo never outlives an update
        return super().probabilities()

    def _frozen(self) -> set[str]:
        """Also the frozen model's scores (rebuilt from the cache at every start); the frozen model's weights are
        parameters without gradients, which the state never holds."""
        return super()._frozen() | {n for n, _ in self.model.policy.named_buffers()
                                    if n.rsplit(".", 1)[-1] == "scores"}
