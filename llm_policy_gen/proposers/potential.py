"""The ``offline`` backend's shaping potentials for ``--mode reward`` (a deterministic stand-in, NOT an LLM).

Where an LLM would write a potential from its understanding of the task, the offline optimiser builds one from two
things a prompt carries:

* **the spec's prior rule** (specs with a linear prior over a ``Box`` observation, e.g. CartPole): the rule's score
  ``bias + w . bin_centre`` is 0 on its switching surface (pole upright and still) and large where the rule has to
  correct hardest, so ``-|score|``, scaled to ``[-1, 0]``, says how far a state is from balance;
* **the evidence's value estimates**: value iteration on the empirical model of the memory (transition counts and
  mean rewards per state and action, discount ``learner_gamma``), where a (state, action) pair never tried is worth
  ``optimism * v_top`` (R-max style: the learner is drawn towards what it has not tried); ``v_top`` is the largest
  value of a state in the model without optimism, and at least the largest mean step reward seen (at least 1).

Both are in units of return (the prior term is scaled by ``r_max / (1 - gamma)``) and clipped to the target's range.
The K candidates are fixed recipes, in this order: the optimistic value estimate, the value estimate with half the
optimism plus the prior, the prior alone (the value estimate without optimism where the spec has no prior), and an
even blend; candidates after the fourth are random convex blends of the three, drawn from
``numpy.random.default_rng([seed, iteration, candidate])``. The same prompt context gives the same potentials.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..discretize import BoxDiscretizer
from ..prompting.context import IterationState
from ..prompting.memory import SparseTransitions, transition_totals

__all__ = ["potential_tables", "prior_potential", "model_values"]


def prior_potential(ctx: IterationState) -> np.ndarray | None:
    """``-|score| / max |score|`` of the spec's linear prior at the bin centres, or None without a prior."""
    prior, obs = ctx.spec.prior, ctx.observation
    if prior is None or not isinstance(obs, BoxDiscretizer):
        return None
    centres = obs.centers()
    index = {d.name: j for j, d in enumerate(obs.dims)}
    score = np.full(obs.n_states, float(prior.bias))
    for name, w in prior.weights.items():
        score += float(w) * centres[:, index[name]]
    top = float(np.max(np.abs(score)))
    return -np.abs(score) / top if top > 0 else np.zeros(obs.n_states)


def _r_max(ctx: IterationState) -> float:
    ev = ctx.evidence
    n = transition_totals(ev.transitions)
    seen = n > 0
    r = ev.reward_sum[seen] / n[seen]
    return float(max(1.0, float(np.max(r)) if r.size else 1.0))


def _model(ctx: IterationState) -> tuple[np.ndarray, np.ndarray, Callable[[np.ndarray], np.ndarray]]:
    """(tried pairs, mean rewards, ``v -> expected v[next state]`` per pair) of the evidence's empirical model."""
    ev = ctx.evidence
    n = transition_totals(ev.transitions)
    ns, na = n.shape
    tried = n > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.where(tried, ev.reward_sum / np.maximum(n, 1), 0.0)
    t = ev.transitions
    if isinstance(t, SparseTransitions):
        pairs, nxt = t.pairs, t.next_states
        w = t.counts / np.maximum(n.reshape(-1)[pairs], 1)
        return tried, r, lambda v: np.bincount(pairs, weights=w * v[nxt], minlength=ns * na).reshape(ns, na)
    p = np.asarray(t, dtype=np.float64).reshape(ns * na, ns + 1) / np.maximum(n.reshape(-1, 1), 1)
    return tried, r, lambda v: (p @ v).reshape(ns, na)


def model_values(ctx: IterationState, gamma: float, untried: float, sweeps: int = 3000) -> np.ndarray:
    """State values of the empirical model by value iteration; a pair never tried is worth ``untried``."""
    tried, r, expect = _model(ctx)
    v = np.zeros(tried.shape[0] + 1)  # the last entry: terminated
    for _ in range(sweeps):
        new = np.append(np.where(tried, r + gamma * expect(v), untried).max(axis=1), 0.0)
        done = float(np.max(np.abs(new - v))) < 1e-6 * max(1.0, float(np.max(np.abs(new))))
        v = new
        if done:
            break
    return v[:-1]


def potential_tables(ctx: IterationState, k: int, seed: int) -> list[tuple[np.ndarray, str]]:
    """``k`` potentials for ``ctx`` (a value target) and a one-line rationale each."""
    gamma = float(ctx.extra.get("learner_gamma", ctx.evidence.gamma))
    scale = _r_max(ctx) / (1.0 - gamma)
    plain = model_values(ctx, gamma, 0.0)
    top = max(_r_max(ctx), float(plain.max()))
    explore = model_values(ctx, gamma, top)
    half = model_values(ctx, gamma, 0.5 * top)
    prior = prior_potential(ctx)
    if prior is None:
        third, third_text = plain, "value estimate without optimism"
        with_prior = half
    else:
        third, third_text = prior * scale, "prior rule: -|score| scaled to [-r_max/(1-gamma), 0]"
        with_prior = 0.5 * (half + third)
    recipes = [
        (explore, f"value estimate of the empirical model, untried actions worth {top:.3g}"),
        (with_prior, "value estimate with half the optimism" + ("" if prior is None else ", averaged with the prior")),
        (third, third_text),
        (0.5 * (explore + third), "even blend of the optimistic value estimate and the " + third_text.split(":")[0]),
    ]
    out: list[tuple[np.ndarray, str]] = []
    for c in range(1, k + 1):
        if c <= len(recipes):
            phi, text = recipes[c - 1]
        else:
            w = np.random.default_rng([seed, ctx.iteration, c]).dirichlet(np.ones(3))
            phi = w[0] * explore + w[1] * half + w[2] * third
            text = f"random blend {np.round(w, 2).tolist()} of the optimistic, half-optimistic and third recipes"
        phi = np.clip(phi, ctx.target.low, ctx.target.high)
        out.append((phi, f"offline potential (not an LLM): {text}; from {phi.min():.3g} to {phi.max():.3g}"))
    return out
