"""``--rules-refine N``: the model writes the rules' structure, the population search tunes their numbers in between.

COLMO (2025) has a model write a policy's structure and a gradient-free optimiser tune its numbers, so that a weak
model's structure is still used when its numbers are poor. :class:`RefiningProposer` alternates: iteration 1, N + 2,
2N + 3, ... ask the model (:class:`~llm_policy_gen.proposers.llm.LLMProposer`); each of the N iterations after a
model call is a refinement (:class:`RuleRefinement`), which never calls the model:

* it starts from the kept rules (the keeper's current source; a table that was not compiled from rules is first
  written as the decision list equal to it); when they have no number to tune (a constant initial table the
  model's rules never beat), it starts from the rules of the last model call instead, the best test mean first, so
  that a weak model's structure is used even when its numbers lose, and
* runs the offline search's augmented random search (:class:`~llm_policy_gen.proposers.population.LinearRuleSearch`)
  over their numbers: every weight, bias and product weight of the linear rules, and every inner bound of the
  cases' conditions (a bound at a dimension's first or last bin stays: it means "and below" or "and above"). Bounds
  move as reals and are rounded to bins when the rules are written (a bound moves by about one bin per 0.5 of search
  noise). The thresholds of linear rules, the dimensions of their products, the cases' entries and ``otherwise`` are
  the model's structure and stay as written.

When neither the kept rules nor the model's last rules have a number to tune (only ``otherwise``, or cases over
whole dimensions), there is nothing to refine: that iteration asks the model instead. Refinements are rendered and
parsed in the rules format like any non-LLM answer and written to the transcript with ``phase`` ``refine`` and
``backend`` ``refine``, so the transcript shows which iterations were model calls; the state (the search, its
starting rules, whether the last iteration asked the model, the model's last rules) is in the proposer's
``state_dict``, so a killed run resumes, and a ``replay:`` of its transcript reproduces it.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..clients.base import Message
from ..clients.session import Answer
from ..clients.transcript import Transcript
from ..formats.base import table_dims
from ..formats.rules import table_as_rules
from ..formats.ruleset import RuleSet
from ..prompting.context import IterationState
from ..storage.safe_json import loads
from .base import Proposer, TableSearch
from .population import DIGITS, LinearRuleSearch

__all__ = ["RefiningProposer", "RuleRefinement", "KeptRulesSearch", "kept_rules", "BIN_STEP"]

BIN_STEP = 0.5
"""Search units per bin of a case bound: a bound at bin ``b`` is the parameter ``b * BIN_STEP``, so the search's
noise (0.5 by default) moves a bound by about one bin."""


def kept_rules(ctx: IterationState) -> RuleSet:
    """The rules the kept table was compiled from, else the decision list equal to the kept table."""
    rules = RuleSet.of_source(ctx.current_source)
    if rules is not None:
        return rules
    return table_as_rules(np.asarray(ctx.current_table), ctx.observation, ctx.target)


class KeptRulesSearch(LinearRuleSearch):
    """The population search over the numbers of one rule set (see the module docstring)."""

    search_name = "population search over the numbers of the kept rules"

    def __init__(self, seed: int = 0) -> None:
        super().__init__(seed)
        self.base: RuleSet | None = None
        """The rules whose numbers are searched (their structure is kept)."""
        self.slots: list[tuple[int, int, str]] = []
        """Per case bound searched: (case, condition, ``min_bin`` or ``max_bin``)."""

    def restart(self, rules: RuleSet, ctx: IterationState) -> None:
        """Search the numbers of ``rules`` from where they are."""
        sizes = table_dims(ctx.observation)
        self.base = RuleSet(copy.deepcopy(rules.cases), copy.deepcopy(rules.linear), rules.otherwise)
        self.slots = [(i, j, key) for i, case in enumerate(self.base.cases)
                      for j, cond in enumerate(case["conditions"])
                      for key, inner in (("min_bin", int(cond["min_bin"]) > 0),
                                         ("max_bin", int(cond["max_bin"]) < sizes[int(cond["dim"])] - 1))
                      if inner]
        linear = [float(x) for rule in self.base.linear
                  for x in [*rule["weights"], rule["bias"], *(p["weight"] for p in rule.get("products", ()))]]
        bounds = [BIN_STEP * int(self.base.cases[i]["conditions"][j][key]) for i, j, key in self.slots]
        self.start(np.round(np.array(linear + bounds, dtype=np.float64), DIGITS), ctx)

    @property
    def size(self) -> int:
        """How many numbers are searched."""
        return 0 if self.theta is None else int(self.theta.size)

    def _begin(self, ctx: IterationState) -> None:
        if self.base is None:
            self.restart(kept_rules(ctx), ctx)

    def candidate(self, params: np.ndarray, ctx: IterationState) -> RuleSet:
        assert self.base is not None
        sizes = table_dims(ctx.observation)
        p = [float(x) for x in np.asarray(params, dtype=np.float64).reshape(-1)]
        linear, k = copy.deepcopy(self.base.linear), 0
        for rule in linear:
            n = len(rule["weights"])
            rule["weights"] = [round(x, DIGITS) for x in p[k : k + n]]
            rule["bias"] = round(p[k + n], DIGITS)
            k += n + 1
            for product in rule.get("products", ()):
                product["weight"] = round(p[k], DIGITS)
                k += 1
        cases = copy.deepcopy(self.base.cases)
        for (i, j, key), x in zip(self.slots, p[k:], strict=True):
            cond = cases[i]["conditions"][j]
            cond[key] = int(np.clip(round(x / BIN_STEP), 0, sizes[int(cond["dim"])] - 1))
        for case in cases:  # a bound that moved past its partner: the two swap
            for cond in case["conditions"]:
                cond["min_bin"], cond["max_bin"] = sorted((int(cond["min_bin"]), int(cond["max_bin"])))
        return RuleSet(cases, linear, self.base.otherwise)

    def state_dict(self) -> dict[str, Any]:
        base = None if self.base is None else json.dumps(self.base.to_dict())
        return {**super().state_dict(), "base": base or "", "slots": json.dumps(self.slots)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        base = str(state.get("base") or "")
        self.base = RuleSet.from_dict(loads(base)) if base else None
        self.slots = [(int(i), int(j), str(key)) for i, j, key in loads(str(state.get("slots") or "[]"))]


class RuleRefinement(TableSearch):
    """The refinement iterations of ``--rules-refine``: the kept rules' numbers tuned, no model called."""

    name = "refine"
    label = "refine: population search over the kept rules' numbers (not an LLM)"
    phase = "refine"

    def __init__(self, seed: int = 0, transcript: Transcript | None = None) -> None:
        super().__init__(seed, transcript)
        self.search = KeptRulesSearch(seed)

    def restart(self, ctx: IterationState, fallbacks: Sequence[RuleSet] = ()) -> None:
        """Start from the kept rules, or, when they have no number to tune, from the first of ``fallbacks`` that has
        (``search.size`` says how many numbers the chosen rules have to tune)."""
        self.search.restart(kept_rules(ctx), ctx)
        for rules in fallbacks:
            if self.search.size:
                break
            self.search.restart(rules, ctx)

    def tables(self, ctx: IterationState, k: int) -> list[tuple[Any, str]]:
        return list(self.search.propose(ctx, k))

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "search": self.search.describe()}

    def state_dict(self) -> dict[str, Any]:
        return {"search": self.search.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.search.load_state_dict(state["search"])


class RefiningProposer:
    """A model call, then ``every`` refinements of the kept rules, in turn (see the module docstring)."""

    def __init__(self, llm: Proposer, every: int, seed: int = 0, transcript: Transcript | None = None) -> None:
        if every < 1:
            raise ValueError(f"bad every {every}: accepted an integer >= 1")
        self.llm = llm
        self.every = int(every)
        self.refinement = RuleRefinement(seed, transcript)
        self.name, self.model, self.is_llm = llm.name, llm.model, llm.is_llm
        self.asked_model = False
        """Whether the last proposal came from the model (the next refinement starts from the kept rules)."""
        self.model_rules: list[tuple[int, int, dict[str, Any]]] = []
        """(iteration, candidate, rules) of the last model call's valid rules answers: where a refinement starts
        when the kept rules have nothing to tune (a weak model's rules that were not adopted)."""

    def refines(self, iteration: int) -> bool:
        """Whether ``iteration`` is scheduled as a refinement (the model is asked at 1, every + 2, ...)."""
        return (iteration - 1) % (self.every + 1) != 0

    def propose(self, ctx: IterationState, messages: Sequence[Message], k: int) -> list[Answer[Any]]:
        if self.refines(ctx.iteration):
            if self.asked_model:  # a refinement phase begins: from the rules kept after the model's answers
                self.refinement.restart(ctx, self._model_rules_best_first(ctx))
            if self.refinement.search.size:
                self.asked_model = False
                return self.refinement.propose(ctx, messages, k)
        self.asked_model = True
        answers = self.llm.propose(ctx, messages, k)
        self.model_rules = [(ctx.iteration, a.candidate, a.parsed.source) for a in answers
                            if a.parsed is not None and a.parsed.source
                            and RuleSet.of_source(a.parsed.source) is not None]
        return answers

    def _model_rules_best_first(self, ctx: IterationState) -> list[RuleSet]:
        """The last model call's rules, the best test mean first (unscored ones last, in candidate order)."""
        means = {(h.iteration, h.candidate): h.test_mean for h in ctx.history}

        def rank(item: tuple[int, int, dict[str, Any]]) -> tuple[bool, float]:
            mean = means.get((item[0], item[1]))
            return mean is None, -(mean or 0.0)

        return [RuleSet.from_dict(src) for *_, src in sorted(self.model_rules, key=rank)]

    def describe(self) -> dict[str, Any]:
        return {**self.llm.describe(), "refine": self.every, "refinement": self.refinement.describe()}

    def state_dict(self) -> dict[str, Any]:
        return {"llm": self.llm.state_dict(), "refinement": self.refinement.state_dict(),
                "asked_model": self.asked_model, "model_rules": json.dumps(self.model_rules)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.llm.load_state_dict(state["llm"])
        self.refinement.load_state_dict(state["refinement"])
        self.asked_model = bool(state["asked_model"])
        self.model_rules = [(int(i), int(c), dict(src)) for i, c, src in loads(str(state.get("model_rules")
                                                                                         or "[]"))]
