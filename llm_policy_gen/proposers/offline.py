"""``offline``: a deterministic optimiser that is NOT a language model.

It is the default backend when no key is configured and the baseline every LLM must beat. It sees only what a
prompt carries, through the :class:`~llm_policy_gen.prompting.builder.IterationState` the prompt was rendered from: the
current best table, the scores of earlier candidates (history), the experience memory's per-state evidence, and the
environment spec with its prior rules. It never steps an environment, so every episode a run uses is counted by the
engine. Its proposals are rendered as text in the same answer format an LLM must use and go through the same parser
and validator.

Three kinds of move, each giving K different candidates per iteration:

* **Population search over rules** (``--output-format rules``: a format whose answers are rule sets, its
  ``refinable`` set): augmented random search over the weights of linear rules, using the K candidates of each
  iteration as pairs of opposite steps from the search centre and moving the centre with their test means
  (:mod:`llm_policy_gen.proposers.population`).

* **Rule search** (specs with a linear prior, e.g. CartPole): a (1+K) evolution strategy over the weights of the
  linear rule ``action = positive if w . normalised_bin_centre + b > 0``. The first candidate ever is the prior
  itself. Each later candidate perturbs the weights of the best accepted rule: even candidates with Gaussian noise
  of scale ``sigma``, odd ones with a *gain move* that keeps the signs and scales each weight by a log-normal factor
  (a prior is sure of its signs, not of its gains' ratio). The history tells whether one of the last iteration's
  candidates was kept (sigma x1.5) or all were reverted (sigma x0.85, floor 0.12; after 6 such iterations in a row
  sigma restarts at 0.6).
* **Model-based improvement** (any other table): value iteration on an empirical model of every counted episode
  (:mod:`llm_policy_gen.proposers.model`); odd candidates value untried (state, action) pairs optimistically (R-max
  style) so that their test episodes explore, even candidates exploit what the model knows.

Randomness comes from ``numpy.random.default_rng([seed, iteration, candidate])``: the same prompt context gives the
same answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..clients.transcript import Transcript
from ..discretize import BoxDiscretizer
from ..prompting.context import IterationState
from .base import TableSearch
from .model import EmpiricalModel, model_tables
from .population import LinearRuleSearch

__all__ = ["OfflineProposer", "NOT_AN_LLM"]

NOT_AN_LLM = "offline (deterministic optimiser, not an LLM)"


@dataclass
class _RuleState:
    best_w: np.ndarray
    sigma: float
    fails: int = 0


class OfflineProposer(TableSearch):
    """Deterministic non-LLM optimiser. See the module docstring for the algorithm."""

    name = "offline"
    label = NOT_AN_LLM

    def __init__(
        self,
        seed: int = 0,
        transcript: Transcript | None = None,
        sigma0: float = 0.5,
        sigma_min: float = 0.12,
        sigma_restart: float = 0.6,
        restart_after: int = 6,
    ) -> None:
        super().__init__(seed, transcript)
        self.sigma0 = sigma0
        self.sigma_min = sigma_min
        self.sigma_restart = sigma_restart
        self.restart_after = restart_after
        self._rule: _RuleState | None = None
        self._proposed: dict[tuple[int, int], np.ndarray] = {}  # (iteration, candidate) -> weights of a rule
        self._seen_history = 0
        self.rules_search = LinearRuleSearch(seed)
        self.empirical = EmpiricalModel()

    def describe(self) -> dict[str, Any]:
        return {
            "provider": "offline",
            "model": NOT_AN_LLM,
            "is_llm": False,
            "note": "not an LLM: a deterministic optimiser and the baseline every LLM must beat",
            "seed": self.seed,
            "sigma0": self.sigma0,
            "tables": "value iteration on the counted episodes, gamma 1 - 1/episode limit",
            "rules": self.rules_search.describe(),
        }

    def state_dict(self) -> dict[str, Any]:
        rule = None
        if self._rule is not None:
            rule = {"best_w": self._rule.best_w, "sigma": self._rule.sigma, "fails": self._rule.fails}
        keys = sorted(self._proposed)
        return {
            "rule": rule,
            "proposed_keys": np.asarray(keys, dtype=np.int64).reshape(-1, 2),
            "proposed_w": np.asarray([self._proposed[k] for k in keys], dtype=np.float64),
            "seen_history": self._seen_history,
            "rules_search": self.rules_search.state_dict(),
            "model": self.empirical.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        rule = state.get("rule")
        self._rule = None if rule is None else _RuleState(np.asarray(rule["best_w"], dtype=np.float64),
                                                          float(rule["sigma"]), int(rule["fails"]))
        keys = np.asarray(state["proposed_keys"]).reshape(-1, 2)
        ws = np.asarray(state["proposed_w"])
        self._proposed = {(int(i), int(c)): np.asarray(ws[j]) for j, (i, c) in enumerate(keys)}
        self._seen_history = int(state["seen_history"])
        if "rules_search" in state:
            self.rules_search.load_state_dict(state["rules_search"])
        if "model" in state:
            self.empirical.load_state_dict(state["model"])

    # ------------------------------------------------------------------ moves
    def tables(self, ctx: IterationState, k: int) -> list[tuple[Any, str]]:
        if ctx.target.kind == "value":  # shaping potentials (--mode reward)
            from .potential import potential_tables

            return potential_tables(ctx, k, self.seed)
        if ctx.fmt.refinable:  # rule sets, rendered by a format that answers them (rules)
            return list(self.rules_search.propose(ctx, k))
        obs = ctx.observation
        if ctx.spec.prior is not None and isinstance(obs, BoxDiscretizer):
            return self._rule_moves(ctx, obs, k)
        return list(model_tables(self.empirical, ctx, k))

    def _normalised(self, ctx: IterationState, obs: BoxDiscretizer) -> tuple[np.ndarray, np.ndarray, float]:
        centres = obs.centers()
        mid = (obs.low + obs.high) / 2
        half = (obs.high - obs.low) / 2
        prior = ctx.spec.prior
        assert prior is not None
        names = [d.name for d in obs.dims]
        w_raw = np.array([prior.weights.get(n, 0.0) for n in names])
        w = w_raw * half
        bias = prior.bias + float(w_raw @ mid)
        return (centres - mid) / half, w, bias

    def _update_from_history(self, ctx: IterationState) -> None:
        """Read the verdicts on this proposer's earlier candidates, one iteration at a time."""
        assert self._rule is not None
        by_iter: dict[int, list[Any]] = {}
        for h in ctx.history[self._seen_history :]:
            if (h.iteration, h.candidate) in self._proposed:
                by_iter.setdefault(h.iteration, []).append(h)
        for it in sorted(by_iter):
            kept = [h for h in by_iter[it] if h.accepted]
            if kept:
                self._rule.best_w = self._proposed[(it, kept[0].candidate)]
                self._rule.sigma = self._rule.sigma * 1.5
                self._rule.fails = 0
            else:
                self._rule.fails += 1
                self._rule.sigma = max(self.sigma_min, self._rule.sigma * 0.85)
                if self._rule.fails >= self.restart_after:
                    self._rule.sigma, self._rule.fails = self.sigma_restart, 0
        self._seen_history = len(ctx.history)

    def _rule_moves(self, ctx: IterationState, obs: BoxDiscretizer, k: int) -> list[tuple[np.ndarray, str]]:
        prior = ctx.spec.prior
        assert prior is not None
        cn, w0, bias = self._normalised(ctx, obs)

        def table_of(w: np.ndarray) -> np.ndarray:
            return np.where(cn @ w + bias > 0, prior.positive_action, prior.negative_action).astype(np.int64)

        # The rule's sign is what matters: weights and bias are scaled together so that the weights have norm 1.
        scale = max(1e-12, float(np.linalg.norm(w0)))
        bias = bias / scale
        out: list[tuple[np.ndarray, str]] = []
        if self._rule is None:
            self._rule = _RuleState(best_w=w0 / scale, sigma=self.sigma0)
            self._seen_history = len(ctx.history)
            first = table_of(self._rule.best_w)
            if not np.array_equal(first, ctx.current_table):
                self._proposed[(ctx.iteration, 1)] = self._rule.best_w
                out.append((first, "prior rule from the physics hints: " + self._rule_text(obs, self._rule.best_w,
                                                                                           bias)))
        self._update_from_history(ctx)
        for c in range(len(out) + 1, k + 1):
            rng = np.random.default_rng([self.seed, ctx.iteration, c])
            sigma = self._rule.sigma
            cand_w, cand = self._rule.best_w, ctx.current_table
            gain = c % 2 == 1  # odd candidates rescale the weights, even ones add to them
            for _ in range(30):
                w = _gain_move(self._rule.best_w, sigma, rng) if gain else \
                    self._rule.best_w + sigma * rng.standard_normal(self._rule.best_w.size)
                w = w / max(1e-12, float(np.linalg.norm(w)))
                cand_w, cand = w, table_of(w)
                if not np.array_equal(cand, ctx.current_table):
                    break
                sigma *= 1.3
            self._proposed[(ctx.iteration, c)] = cand_w
            move = "gain move" if gain else "rule search"
            out.append((cand, f"{move} (sigma {sigma:.2f}): " + self._rule_text(obs, cand_w, bias)))
        return out

    @staticmethod
    def _rule_text(obs: BoxDiscretizer, w: np.ndarray, bias: float) -> str:
        terms = " ".join(f"{wi:+.2f}*{d.name}" for wi, d in zip(w, obs.dims, strict=True))
        return f"positive action when {terms} {bias:+.2f} > 0 (dimensions scaled to [-1, 1])"


def _gain_move(w: np.ndarray, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """Scale each weight by a log-normal factor (``exp(2 sigma z)``), plus a little additive noise (``0.2 sigma``) so
    that a weight of 0 can become one. A prior is usually sure of its signs ("push toward the side the pole leans")
    and unsure of its gains, whose best ratio also depends on the bins the rule is read at. An additive step large
    enough to change a ratio several-fold often flips the sign of a small weight too (a third of them from CartPole's
    prior); a gain move changes the ratio as much and keeps the signs 9 times in 10."""
    return w * np.exp(2 * sigma * rng.standard_normal(w.size)) + 0.2 * sigma * rng.standard_normal(w.size)
