"""``offline``: a deterministic optimiser that is NOT a language model.

It is the default backend when no key is configured and the baseline every LLM must beat. It sees only what a
prompt carries, through the :class:`~llm_policy_gen.prompt.PromptContext` the prompt was rendered from: the current
best table, the scores of earlier candidates (history), the experience memory's per-state evidence, and the
environment spec with its prior rules. It never steps an environment, so every episode a run uses is counted by the
engine. Its proposals are rendered as text in the same answer format an LLM must use and go through the same parser
and validator.

Two kinds of move, each giving K different candidates per iteration:

* **Rule search** (specs with a linear prior, e.g. CartPole): a (1+K) evolution strategy over the weights of the
  linear rule ``action = positive if w . normalised_bin_centre + b > 0``. The first candidate ever is the prior
  itself. Each later candidate perturbs the weights of the best accepted rule with Gaussian noise of scale
  ``sigma``; the history tells whether one of the last iteration's candidates was kept (sigma x1.5) or all were
  reverted (sigma x0.85, floor 0.12; after 6 such iterations in a row sigma restarts at 0.6).
* **Model-based improvement** (any other table): value iteration on the empirical model built from the evidence's
  transition counts and mean rewards, with unvisited (state, action) pairs valued optimistically (R-max style) so
  that proposals explore; a candidate is the greedy table, changing only states whose best action differs.
  Candidates differ in which untried action each state tries first.

Randomness comes from ``numpy.random.default_rng([seed, iteration, candidate])``: the same prompt context gives the
same answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..discretize import BoxDiscretizer
from ..memory import expected_next, transition_totals
from ..prompt import PromptContext
from ..session import Transcript
from .base import TableSearch

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
        gamma: float = 0.95,
    ) -> None:
        super().__init__(seed, transcript)
        self.sigma0 = sigma0
        self.sigma_min = sigma_min
        self.sigma_restart = sigma_restart
        self.restart_after = restart_after
        self.gamma = gamma
        self._rule: _RuleState | None = None
        self._proposed: dict[tuple[int, int], np.ndarray] = {}  # (iteration, candidate) -> weights of a rule
        self._seen_history = 0

    def describe(self) -> dict[str, Any]:
        return {
            "provider": "offline",
            "model": NOT_AN_LLM,
            "is_llm": False,
            "note": "not an LLM: a deterministic optimiser and the baseline every LLM must beat",
            "seed": self.seed,
            "sigma0": self.sigma0,
            "gamma": self.gamma,
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
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        rule = state.get("rule")
        self._rule = None if rule is None else _RuleState(np.asarray(rule["best_w"], dtype=np.float64),
                                                          float(rule["sigma"]), int(rule["fails"]))
        keys = np.asarray(state["proposed_keys"]).reshape(-1, 2)
        ws = np.asarray(state["proposed_w"])
        self._proposed = {(int(i), int(c)): np.asarray(ws[j]) for j, (i, c) in enumerate(keys)}
        self._seen_history = int(state["seen_history"])

    # ------------------------------------------------------------------ moves
    def tables(self, ctx: PromptContext, k: int) -> list[tuple[np.ndarray, str]]:
        obs = ctx.observation
        if ctx.spec.prior is not None and isinstance(obs, BoxDiscretizer):
            return self._rule_moves(ctx, obs, k)
        return [self._model_move(ctx, c, k) for c in range(1, k + 1)]

    def _normalised(self, ctx: PromptContext, obs: BoxDiscretizer) -> tuple[np.ndarray, np.ndarray, float]:
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

    def _update_from_history(self, ctx: PromptContext) -> None:
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

    def _rule_moves(self, ctx: PromptContext, obs: BoxDiscretizer, k: int) -> list[tuple[np.ndarray, str]]:
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
            for _ in range(30):
                w = self._rule.best_w + sigma * rng.standard_normal(self._rule.best_w.size)
                w = w / max(1e-12, float(np.linalg.norm(w)))
                cand_w, cand = w, table_of(w)
                if not np.array_equal(cand, ctx.current_table):
                    break
                sigma *= 1.3
            self._proposed[(ctx.iteration, c)] = cand_w
            out.append((cand, f"rule search (sigma {sigma:.2f}): " + self._rule_text(obs, cand_w, bias)))
        return out

    @staticmethod
    def _rule_text(obs: BoxDiscretizer, w: np.ndarray, bias: float) -> str:
        terms = " ".join(f"{wi:+.2f}*{d.name}" for wi, d in zip(w, obs.dims, strict=True))
        return f"positive action when {terms} {bias:+.2f} > 0 (dimensions scaled to [-1, 1])"

    def _model_move(self, ctx: PromptContext, candidate: int = 1, k: int = 1) -> tuple[np.ndarray, str]:
        ev = ctx.evidence
        ns, na = ev.counts.shape
        n = transition_totals(ev.transitions)
        visited = n > 0
        with np.errstate(invalid="ignore", divide="ignore"):
            r = np.where(visited, ev.reward_sum / np.maximum(n, 1), 0.0)
        r_max = float(max(1.0, np.max(r[visited]) if visited.any() else 1.0))
        # Explore (unvisited pairs worth r_max forever) until some episode in memory scored above the best table;
        # then exploit (unvisited pairs worth nothing) so that the proposal follows the better episode's path.
        best = ctx.best_eval_mean if ctx.best_eval_mean is not None else -np.inf
        exploit = any(ep.ret > best + 1e-9 for ep in ctx.memory.episodes)
        v_opt = 0.0 if exploit else r_max / (1.0 - self.gamma)
        # Among untried actions, prefer a different one per state and iteration, so that successive greedy
        # episodes leave a new state in different directions (ties would otherwise all pick action 0).
        rot = (np.arange(na)[None, :] - np.arange(ns)[:, None] - (ctx.iteration - 1) * k - candidate) % na
        untried = v_opt + 1e-6 * (rot == 0)
        v = np.zeros(ns + 1)
        q = np.zeros((ns, na))
        for _ in range(1000):
            q = np.where(visited, r + self.gamma * expected_next(ev.transitions, v), untried)
            new_v = np.append(q.max(axis=1), 0.0)
            if np.max(np.abs(new_v - v)) < 1e-6:
                v = new_v
                break
            v = new_v
        table = np.array(ctx.current_table, dtype=np.int64, copy=True)
        cur_q = q[np.arange(ns), table]
        best_a = np.argmax(q, axis=1)
        change = q[np.arange(ns), best_a] > cur_q + 1e-9
        table[change] = best_a[change]
        n_unvisited = int((~visited).sum())
        mode = "exploit: an episode beat the best table" if exploit else "explore: untried pairs valued optimistically"
        return table, (
            f"greedy table of the empirical model (value iteration, gamma {self.gamma}, {mode}); "
            f"{int(change.sum())} states changed; {n_unvisited} state-action pairs never tried"
        )
