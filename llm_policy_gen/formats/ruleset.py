"""The rule language of the ``rules`` answer format: how validated rules decide a state, compiled into a whole
table (:meth:`RuleSet.compile`) or acting on raw observations (:class:`RulesPolicy`) through the same code path, so
that acting with the rules and looking the compiled table up give exactly the same actions.

Rules have up to three parts:

* **cases** -- an ordered decision list over bin ranges: the first case whose conditions all hold decides the state
  (a condition is a range of bins on one dimension, as in the ``edits`` format; an unlisted dimension matches any
  bin, so ``"conditions": []`` matches every state).
* **linear** -- decides the states no case matches. Each rule scores a state as
  ``score = bias + sum_j weights[j] * x_j``, where ``x_j`` is the centre of the state's bin on dimension ``j``
  scaled so that the dimension's low bound is -1 and its high bound +1 (:func:`feature_values`), plus, for each of
  the rule's optional ``products`` ``{"dims": [i, j], "weight": w}``, ``w * x_i * x_j`` (a condition on two
  dimensions at once, e.g. "low and falling fast"; ``i = j`` is a square). Then (:func:`linear_form`):

  - *levels* (``Box``/``MultiDiscrete`` actions, or ``Discrete`` actions in index order): one rule per action
    dimension (``output`` = the dimension; ``output`` 0 for a ``Discrete`` action); the dimension takes level
    ``k`` = how many of the rule's ascending ``thresholds`` are ``<= score`` (so ``levels - 1`` thresholds);
  - *scores* (``Discrete`` actions only): one rule per action (``output`` = the action, ``thresholds`` empty); the
    action with the highest score is taken (the lowest index among equal scores); actions without a rule are never
    taken;
  - *value* targets (a shaping potential): one rule, ``output`` 0, no thresholds; the value is the score, clipped
    to the target's range.

* **otherwise** -- the action (or value) of the states no case matches, when ``linear`` is empty (with linear rules
  it is ignored, and may be null).

The answer that carries rules, its schema and its validator are in :mod:`.rules`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..discretize import (
    ActionDiscretizer,
    BoxActions,
    BoxDiscretizer,
    DiscreteActions,
    MultiDiscreteActions,
    ObservationDiscretizer,
)
from .base import Target, table_dims
from .edits import table_as_edits

__all__ = ["RuleSet", "RulesPolicy", "feature_values", "output_levels", "linear_form", "RULES_VERSION",
           "table_as_rules", "rules_text"]

RULES_VERSION = 1
"""Version of the ``source`` a rules policy file carries."""
_CHUNK = 65536
"""States compiled at once (bounds the memory of a million-state table)."""


# ---------------------------------------------------------------------------------------------------- features
def feature_values(observation: ObservationDiscretizer) -> list[np.ndarray]:
    """Per table dimension, the scaled value ``x`` of each bin: its centre with the low bound at -1, the high at +1.

    For a ``Box`` observation the centre is the middle of the bin's edges (so ``seed`` binning's narrower edge bins
    are honoured); for a grid world the rows and columns, and for any other ``Discrete`` observation the state index,
    are spread evenly (bin ``b`` of ``n``: ``(2b + 1) / n - 1``).
    """
    if isinstance(observation, BoxDiscretizer):
        out = []
        for j, bounds in enumerate(observation.boundaries):
            lo, hi = float(observation.low[j]), float(observation.high[j])
            centre = (bounds[:-1] + bounds[1:]) / 2
            out.append((centre - (lo + hi) / 2) / ((hi - lo) / 2))
        return out
    return [(2 * np.arange(n) + 1) / n - 1 for n in table_dims(observation)]


def output_levels(actions: ActionDiscretizer) -> tuple[int, ...]:
    """Levels of each action dimension a linear rule can set (a ``Discrete`` action is one dimension)."""
    if isinstance(actions, BoxActions):
        return tuple(int(v) for v in actions.levels)
    if isinstance(actions, MultiDiscreteActions):
        return tuple(int(v) for v in actions.nvec)
    return (int(actions.n_actions),)


def linear_form(actions: ActionDiscretizer, target: Target, rules: Sequence[Mapping[str, Any]]) -> str:
    """``levels``, ``scores`` or ``value``: how ``rules`` turn scores into entries (see the module docstring)."""
    if target.kind == "value":
        return "value"
    if isinstance(actions, DiscreteActions) and rules and all(not r["thresholds"] for r in rules):
        return "scores"
    return "levels"


def _state_bins(observation: ObservationDiscretizer, states: np.ndarray) -> np.ndarray:
    """(N, n_dims) bins of flat state indices."""
    return np.stack(np.unravel_index(np.asarray(states, dtype=np.int64), table_dims(observation)), axis=1)


@dataclass(frozen=True)
class _Grid:
    """Every state's bins and scaled features, dimension-major (computed once per discretization)."""

    bins: np.ndarray
    """(n_dims, n_states) bin of each state on each dimension."""
    x: np.ndarray
    """(n_dims, n_states) scaled feature of each state on each dimension."""


_GRIDS: dict[str, _Grid] = {}
"""The last few grids, by discretizer spec."""


def _grid(observation: ObservationDiscretizer) -> _Grid:
    key = json.dumps(observation.to_spec(), sort_keys=True)
    grid = _GRIDS.get(key)
    if grid is None:
        features = feature_values(observation)
        bins = np.unravel_index(np.arange(observation.n_states, dtype=np.int64), table_dims(observation))
        small = np.int16 if max(table_dims(observation)) < 2**15 else np.int64
        grid = _Grid(np.stack([b.astype(small) for b in bins]), np.stack([features[j][b] for j, b in enumerate(bins)]))
        while len(_GRIDS) >= 4:
            del _GRIDS[next(iter(_GRIDS))]
        _GRIDS[key] = grid
    return grid


def _observation_bins(observation: ObservationDiscretizer, obs: np.ndarray) -> np.ndarray:
    """(N, n_dims) bins of raw observations."""
    if isinstance(observation, BoxDiscretizer):
        return observation.encode_bins(obs)
    return _state_bins(observation, observation.encode(obs))


# ---------------------------------------------------------------------------------------------------- rule sets
@dataclass(frozen=True)
class RuleSet:
    """Validated rules (plain JSON-shaped data), and how they decide a state.

    ``cases`` items are ``{"conditions": [{"dim", "min_bin", "max_bin"}, ...], field: entry}`` (``field`` is
    ``action`` or ``value``); ``linear`` items ``{"output", "weights", "bias", "thresholds"}`` and optionally
    ``"products": [{"dims": [i, j], "weight": w}, ...]`` (absent: none).
    """

    cases: list[dict[str, Any]] = field(default_factory=list)
    linear: list[dict[str, Any]] = field(default_factory=list)
    otherwise: int | float | None = None

    def to_dict(self) -> dict[str, Any]:
        """The rules as a policy file's ``source`` (an answer carries the same three parts and a rationale)."""
        return {"format": "rules", "version": RULES_VERSION, "cases": self.cases, "linear": self.linear,
                "otherwise": self.otherwise}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RuleSet:
        return cls([dict(c) for c in data.get("cases", [])], [dict(r) for r in data.get("linear", [])],
                   data.get("otherwise"))

    @classmethod
    def of_source(cls, source: Mapping[str, Any] | None) -> RuleSet | None:
        """The rules a policy's ``source`` holds (:meth:`to_dict`), or None: no source, or another format's."""
        if source is not None and source.get("format") == "rules":
            return cls.from_dict(source)
        return None

    def to_json(self, rationale: str) -> str:
        """The answer text (shortest float representations, no spaces)."""
        body = {"rationale": rationale, "cases": self.cases, "linear": self.linear, "otherwise": self.otherwise}
        return json.dumps(body, separators=(",", ":"))

    def decide(self, bins: np.ndarray, x: np.ndarray, actions: ActionDiscretizer,
               target: Target) -> tuple[np.ndarray, int]:
        """Entries for (n_dims, N) bins and their (n_dims, N) scaled features, and how many linear values were
        clipped to the target's range.

        The only place rules are evaluated: compiling a table and acting on observations both come here.
        """
        n = bins.shape[1]
        clipped = 0
        if self.linear:
            scores = []
            for rule in self.linear:
                s = np.full(n, float(rule["bias"]))
                for j, w in enumerate(rule["weights"]):  # a fixed order of additions: the same floats every time
                    s = s + float(w) * x[j]
                for p in rule.get("products", ()):  # after the weights, so rules without products are unchanged
                    i, j = (int(d) for d in p["dims"])
                    s = s + float(p["weight"]) * (x[i] * x[j])
                scores.append(s)
            form = linear_form(actions, target, self.linear)
            if form == "value":
                lo, hi = target.low, target.high
                clipped = int(np.sum((scores[0] < lo) | (scores[0] > hi)))
                out = np.clip(scores[0], lo, hi)
            elif form == "scores":
                stacked = np.full((n, actions.n_actions), -np.inf)
                for rule, s in zip(self.linear, scores, strict=True):
                    stacked[:, int(rule["output"])] = s
                out = np.argmax(stacked, axis=1).astype(np.int64)
            else:
                sizes = output_levels(actions)
                levels = [np.zeros(n, dtype=np.int64) for _ in sizes]
                for rule, s in zip(self.linear, scores, strict=True):
                    levels[int(rule["output"])] = np.searchsorted(np.asarray(rule["thresholds"], dtype=np.float64),
                                                                  s, side="right").astype(np.int64)
                out = np.ravel_multi_index(tuple(levels), sizes).astype(np.int64)
        else:
            assert self.otherwise is not None
            out = np.full(n, self.otherwise, dtype=np.int64 if target.kind == "action" else np.float64)
        out = target.array(out)
        decided = np.zeros(n, dtype=bool)
        for case in self.cases:
            hit = ~decided
            for c in case["conditions"]:
                col = bins[int(c["dim"])]
                hit &= (col >= int(c["min_bin"])) & (col <= int(c["max_bin"]))
            out[hit] = case[target.field]
            decided |= hit
        return out, clipped

    def compile(self, observation: ObservationDiscretizer, actions: ActionDiscretizer,
                target: Target) -> np.ndarray:
        """The whole table the rules give."""
        return self.compile_with_notes(observation, actions, target)[0]

    def compile_with_notes(self, observation: ObservationDiscretizer, actions: ActionDiscretizer,
                           target: Target) -> tuple[np.ndarray, int]:
        grid = _grid(observation)
        n_states = int(observation.n_states)
        parts, clipped = [], 0
        for start in range(0, n_states, _CHUNK):
            part, c = self.decide(grid.bins[:, start:start + _CHUNK], grid.x[:, start:start + _CHUNK], actions,
                                  target)
            parts.append(part)
            clipped += c
        return target.array(np.concatenate(parts)), clipped


class RulesPolicy:
    """Rules acting on raw observations (a :class:`~llm_policy_gen.policy.Policy`); equal to the compiled table."""

    def __init__(self, rules: RuleSet, observation: ObservationDiscretizer, actions: ActionDiscretizer) -> None:
        self.rules, self.observation, self.actions = rules, observation, actions
        self.target = Target("action", n_actions=actions.n_actions)
        self._features = feature_values(observation)

    def act(self, obs: np.ndarray) -> np.ndarray:
        bins = _observation_bins(self.observation, obs).T
        x = np.stack([f[b] for f, b in zip(self._features, bins, strict=True)])
        return self.rules.decide(bins, x, self.actions, self.target)[0]


def table_as_rules(table: np.ndarray, observation: ObservationDiscretizer, target: Target) -> RuleSet:
    """A decision list equal to ``table``: the most common entry as ``otherwise``, boxes of the others as cases."""
    t = target.array(table).reshape(-1)
    values, counts = np.unique(t, return_counts=True)
    common = values[int(np.argmax(counts))].item()
    boxes = [b for b in table_as_edits(t, observation) if b["entry"] != common]
    cases = [{"conditions": b["conditions"], target.field: b["entry"]} for b in boxes]
    return RuleSet(cases, [], common)


def rules_text(table: np.ndarray, observation: ObservationDiscretizer, target: Target, budget: int,
               size: Callable[[str], int], source: Mapping[str, Any] | None = None) -> str:
    """The rules ``table`` was compiled from (``source``), else a decision list equal to it, as JSON; the first cases
    only when the whole does not fit ``budget`` (measured by ``size``): what a rules prompt shows of the table."""
    rules = RuleSet.of_source(source)
    if rules is not None:
        head = "The current rules (the table is compiled from them):"
    else:
        rules = table_as_rules(np.asarray(table), observation, target)
        head = "The current table, written as rules (it was not compiled from rules):"
    otherwise = rules.otherwise
    if otherwise is None:  # linear rules decide those states; the schema still asks for a value (then ignored)
        otherwise = table_as_rules(np.asarray(table), observation, target).otherwise
    body = {"cases": rules.cases, "linear": rules.linear, "otherwise": otherwise}
    text = json.dumps(body, separators=(",", ":"))
    if size(text) > budget:
        shown = {**body, "cases": []}
        kept: list[dict[str, Any]] = []
        for case in rules.cases:
            if size(json.dumps({**shown, "cases": [*kept, case]}, separators=(",", ":"))) > budget:
                break
            kept.append(case)
        text = json.dumps({**shown, "cases": kept}, separators=(",", ":")) + (
            f"\n({len(rules.cases) - len(kept)} more cases not shown: the first {len(kept)} of "
            f"{len(rules.cases)})")
    return f"{head}\n{text}"
