"""Population search over the weights of linear rules: the offline backend's search for ``--output-format rules``.

Augmented Random Search (Mania, Guy and Recht 2018, "basic random search" with the top-``b`` directions and the
reward-scaled step) over the parameters ``theta`` of the linear rules of the :mod:`rules answer format
<llm_policy_gen.formats.ruleset>`: one rule per action dimension (levels form, fixed thresholds that cut ``[-1, 1]``
into ``levels`` equal parts) or one score per action (scores form). Each iteration the K candidates are
``theta + noise * delta_d`` and ``theta - noise * delta_d`` for ``K // 2`` random directions ``delta_d`` (with K odd,
candidate 1 is ``theta`` itself). The run's keeper scores every candidate on the same test seeds; at the next call the
search reads those scores from the history (``(iteration, candidate) -> test mean``) and moves ``theta`` along the
best directions:

    theta += step / (b * sigma_R) * sum over the top-b directions of (R+ - R-) * delta

where ``sigma_R`` is the standard deviation of the 2b returns used. When every candidate scored the same (a flat
landscape: MountainCar before the car first reaches the flag) the noise grows by half, up to ``noise_max``, so that
later candidates differ more; it returns to ``noise`` once scores differ again. With K = 1 it is a (1+1) search: the
candidate becomes ``theta`` when the keeper adopted it.

It never steps an environment: it reads only the prompt context (history, spec, the scaled bin centres the format
defines), and every episode that judges a candidate is run and counted by the engine. The starting rule is the
spec's prior rule when it has one (:func:`prior_theta`), else zero weights (every state at the middle level, or every
score equal). Randomness: ``numpy.random.default_rng([seed, iteration, 17])``, so the same context and state give the
same candidates; the state (``theta``, the noise, the directions awaiting their scores) is saved in checkpoints.
A spec's ``[search]`` table sets ``noise``, ``step`` and ``top`` for its task (defaults 0.5, 0.5 and 0.5). It may set
``restart_after = N``: when no table has been adopted for N iterations (the search is stuck on a plateau, e.g. a
Swimmer that wriggles in place), ``theta`` goes back to the starting rule and the search begins again with other
random directions; the kept table stays, so a restart can only cost the episodes it spends. It may also
declare ``products``: pairs of dimensions whose product features (``w * x_i * x_j``) every rule carries, their weights
searched with the others (starting at 0). Without declared pairs the parameters, and so every candidate, are exactly
those of the search without products.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..discretize import DiscreteActions
from ..formats.base import table_dims
from ..formats.ruleset import RuleSet, feature_values, output_levels
from ..prompting.context import IterationState

__all__ = ["LinearRuleSearch", "rule_geometry", "prior_theta"]

DIGITS = 3
"""Parameters are rounded to this many decimals (short answers; the rounded values are the candidates)."""


def _form(ctx: IterationState) -> str:
    if not isinstance(ctx.actions, DiscreteActions):
        return "levels"
    if ctx.spec.rules_form:
        return ctx.spec.rules_form
    return "levels" if ctx.actions.n_actions <= 2 else "scores"


def rule_geometry(ctx: IterationState) -> tuple[str, list[list[float]]]:
    """The form (``levels`` or ``scores``) and, per output, its fixed thresholds (even cuts of [-1, 1])."""
    form = _form(ctx)
    if form == "scores":
        return form, [[] for _ in range(ctx.actions.n_actions)]
    return form, [[round(-1 + 2 * k / n, DIGITS) for k in range(1, n)] for n in output_levels(ctx.actions)]


def prior_theta(ctx: IterationState, form: str, gain: float = 3.0) -> np.ndarray:
    """The spec's prior rule as parameters (zeros without a prior).

    The prior's score ``bias + sum w * centre`` is rewritten over the scaled dimensions and normalised; for each
    output the rule moves from the negative action's level to the positive action's level as the score crosses 0
    (``gain`` sets how sharply). In the scores form the positive action scores ``+score`` and the negative ``-score``.
    """
    n_dims = len(table_dims(ctx.observation))
    _, thresholds = rule_geometry(ctx)
    theta = np.zeros((len(thresholds), n_dims + 1))
    prior = ctx.spec.prior
    dims = getattr(ctx.observation, "dims", ())
    if prior is None or len(dims) != n_dims:
        return theta
    names = [d.name for d in dims]
    w_raw = np.array([prior.weights.get(n, 0.0) for n in names])
    low = np.array([d.low for d in dims])
    high = np.array([d.high for d in dims])
    w = w_raw * (high - low) / 2
    b = prior.bias + float(w_raw @ ((low + high) / 2))
    scale = max(1e-12, float(np.linalg.norm(w)))
    score = np.append(w, b) / scale * gain
    if form == "scores":
        theta[prior.positive_action] = score
        theta[prior.negative_action] = -score
        return np.round(theta, DIGITS)
    sizes = output_levels(ctx.actions)
    pos = np.unravel_index(prior.positive_action, sizes)
    neg = np.unravel_index(prior.negative_action, sizes)
    for d, n in enumerate(sizes):
        lo, hi = (-1 + (2 * int(level) + 1) / n for level in (neg[d], pos[d]))  # the middles of the two levels
        theta[d] = score * (hi - lo) / 2
        theta[d, -1] += (lo + hi) / 2
    return np.round(theta, DIGITS)


class LinearRuleSearch:
    """ARS over linear rules. See the module docstring."""

    def __init__(self, seed: int = 0, noise: float = 0.5, step: float = 0.5, top: float = 0.5,
                 noise_max: float = 4.0) -> None:
        self.seed = int(seed)
        self.noise0, self.step, self.top, self.noise_max = float(noise), float(step), float(top), float(noise_max)
        self.theta: np.ndarray | None = None
        self.noise = self.noise0
        self.pending_iteration = 0
        """The iteration whose candidates await their scores (0: none)."""
        self.pending: np.ndarray = np.zeros((0, 0, 0))
        """(K, outputs, dims + 1) parameter offsets of the pending candidates, in candidate order."""
        self.pending_noise = self.noise
        """The noise the pending offsets were drawn with."""
        self.updates = 0
        self.start_theta: np.ndarray | None = None
        """Where the search started (and starts again after ``restart_after`` iterations without an adoption)."""
        self.restart_after = 0
        self.restarted_at = 0
        """The iteration of the last restart (0: none)."""
        self.restarts = 0

    def describe(self) -> dict[str, Any]:
        return {"search": "augmented random search over linear rules", "noise": self.noise0, "step": self.step,
                "top": self.top, "noise_max": self.noise_max}

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        return {"theta": self.theta, "noise": self.noise, "pending_iteration": self.pending_iteration,
                "pending": self.pending, "pending_noise": self.pending_noise, "updates": self.updates,
                "noise0": self.noise0, "step": self.step, "top": self.top, "start_theta": self.start_theta,
                "restart_after": self.restart_after, "restarted_at": self.restarted_at, "restarts": self.restarts}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        theta = state.get("theta")
        self.theta = None if theta is None else np.asarray(theta, dtype=np.float64).copy()
        self.noise = float(state["noise"])
        self.pending_iteration = int(state["pending_iteration"])
        self.pending = np.asarray(state["pending"], dtype=np.float64).copy()
        self.pending_noise = float(state["pending_noise"])
        self.updates = int(state["updates"])
        self.noise0 = float(state.get("noise0", self.noise0))
        self.step, self.top = float(state.get("step", self.step)), float(state.get("top", self.top))
        start = state.get("start_theta")
        self.start_theta = None if start is None else np.asarray(start, dtype=np.float64).copy()
        self.restart_after = int(state.get("restart_after", 0))
        self.restarted_at, self.restarts = int(state.get("restarted_at", 0)), int(state.get("restarts", 0))

    # ------------------------------------------------------------------ search
    def _scores(self, ctx: IterationState) -> list[float | None]:
        """The test means of the pending candidates, in candidate order (None: not scored)."""
        by_candidate = {h.candidate: h for h in ctx.history if h.iteration == self.pending_iteration}
        return [by_candidate[c].test_mean if c in by_candidate else None for c in range(1, len(self.pending) + 1)]

    def _update(self, ctx: IterationState) -> str:
        """Move ``theta`` with the scores of the pending candidates; returns what happened, for the rationale."""
        assert self.theta is not None
        k = len(self.pending)
        if not self.pending_iteration or k == 0:
            return "first candidates"
        scores = self._scores(ctx)
        if k == 1:
            adopted = any(h.accepted for h in ctx.history if h.iteration == self.pending_iteration)
            if adopted:
                self.theta = self.theta + self.pending[0]
                self.updates += 1
            return "the last candidate was kept" if adopted else "the last candidate was not kept"
        first = k % 2  # with K odd, candidate 1 is theta itself
        pairs = [(scores[first + 2 * d], scores[first + 2 * d + 1]) for d in range((k - first) // 2)]
        pairs_ok = [(d, p, m) for d, (p, m) in enumerate(pairs) if p is not None and m is not None]
        if not pairs_ok:
            return "no scored pair"
        returns = np.array([[p, m] for _, p, m in pairs_ok], dtype=np.float64)
        if float(np.ptp(returns)) <= 1e-12:
            self.noise = min(self.noise_max, self.noise * 1.5)
            return f"every candidate scored {returns[0, 0]:.4g}: noise raised to {self.noise:.3g}"
        self.noise = self.noise0
        n_top = max(1, int(round(self.top * len(pairs_ok))))
        order = np.argsort(-returns.max(axis=1), kind="stable")[:n_top]
        used = returns[order]
        sigma = float(used.std()) or 1.0
        grad = np.zeros_like(self.theta)
        for i in order:
            d = pairs_ok[int(i)][0]
            delta = self.pending[first + 2 * d] / max(1e-12, self.pending_noise)
            grad += (returns[i, 0] - returns[i, 1]) * delta
        self.theta = np.round(self.theta + self.step / (n_top * sigma) * grad, DIGITS)
        self.updates += 1
        return f"step {self.updates} along the best {n_top} of {len(pairs_ok)} directions"

    search_name = "random search over linear rules"
    """How rationales name the search."""

    def start(self, theta: np.ndarray, ctx: IterationState) -> None:
        """Search from ``theta`` with the task's own settings (its spec's ``[search]`` table), nothing pending."""
        self.theta = np.asarray(theta, dtype=np.float64)
        self.start_theta = self.theta.copy()
        self.pending_iteration, self.pending = 0, np.zeros((0, 0, 0))
        tuned = ctx.spec.search  # the task's own settings, where its spec gives them
        self.noise0 = self.noise = float(tuned.get("noise", self.noise0))
        self.step, self.top = float(tuned.get("step", self.step)), float(tuned.get("top", self.top))
        self.restart_after = int(tuned.get("restart_after", 0))

    def _restart(self, ctx: IterationState) -> str | None:
        """Go back to the starting rule when no table was adopted in the last ``restart_after`` iterations (and none
        since the last restart); returns what happened, or None."""
        if not self.restart_after or self.start_theta is None:
            return None
        adopted = max((h.iteration for h in ctx.history if h.accepted), default=0)
        judged = ctx.iteration - 1  # the last iteration whose candidates have their verdicts
        if judged - max(adopted, self.restarted_at) < self.restart_after:
            return None
        self.theta, self.noise = self.start_theta.copy(), self.noise0
        self.restarted_at, self.restarts = judged, self.restarts + 1
        return f"restart {self.restarts} from the first rule: no table adopted in {self.restart_after} iterations"

    def _begin(self, ctx: IterationState) -> None:
        """Start from the prior rule (and zero product weights) when the search has no ``theta`` of this task's shape
        yet."""
        form, thresholds = rule_geometry(ctx)
        n_dims, n_products = len(feature_values(ctx.observation)), len(ctx.spec.search_products())
        if self.theta is None or self.theta.shape != (len(thresholds), n_dims + 1 + n_products):
            prior = prior_theta(ctx, form)
            self.start(np.concatenate([prior, np.zeros((len(prior), n_products))], axis=1), ctx)

    def candidate(self, params: np.ndarray, ctx: IterationState) -> RuleSet:
        """The rule set of the parameters ``params`` (``theta`` plus an offset)."""
        form, thresholds = rule_geometry(ctx)
        return self.rules(params, form, thresholds, ctx.spec.search_products())

    def propose(self, ctx: IterationState, k: int) -> list[tuple[RuleSet, str]]:
        """K rule sets around ``theta`` (see the module docstring), each with a one-line rationale."""
        self._begin(ctx)
        assert self.theta is not None
        what = self._update(ctx)
        what = self._restart(ctx) or what
        rng = np.random.default_rng([self.seed, ctx.iteration, 17])
        shape = self.theta.shape
        offsets: list[np.ndarray] = []
        roles: list[str] = []
        if k == 1:
            offsets.append(np.round(self.noise * rng.standard_normal(shape), DIGITS))
            roles.append("a random step from the search centre")
        else:
            if k % 2:
                offsets.append(np.zeros(shape))
                roles.append("the search centre")
            for d in range(1, k // 2 + 1):
                delta = np.round(self.noise * rng.standard_normal(shape), DIGITS)
                offsets += [delta, -delta]
                roles += [f"direction {d} +", f"direction {d} -"]
        self.pending_iteration, self.pending, self.pending_noise = ctx.iteration, np.asarray(offsets), self.noise
        return [(self.candidate(self.theta + off, ctx), f"{self.search_name} ({what}; noise {self.noise:.3g}): {role}")
                for off, role in zip(offsets, roles, strict=True)]

    @staticmethod
    def rules(params: np.ndarray, form: str, thresholds: list[list[float]],
              products: Sequence[tuple[int, int]] = ()) -> RuleSet:
        """The rule set of a parameter array (one row per output: weights, bias, then one weight per product)."""
        n = params.shape[1] - 1 - len(products)
        linear: list[dict[str, Any]] = [{"output": o, "weights": [round(float(x), DIGITS) for x in row[:n]],
                                         "bias": round(float(row[n]), DIGITS), "thresholds": list(thresholds[o])}
                                        for o, row in enumerate(params)]
        if products:
            for rule, row in zip(linear, params, strict=True):
                rule["products"] = [{"dims": [i, j], "weight": round(float(w), DIGITS)}
                                    for (i, j), w in zip(products, row[n + 1:], strict=True)]
        return RuleSet([], linear, None)
