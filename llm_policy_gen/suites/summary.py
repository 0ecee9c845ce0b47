"""The figures of one task and method of a suite, from its current records: what every table prints.

- **per seed**: each seed's held-out mean (the reported policy's, over the run's held-out episodes), always listed;
- **IQM**: rliable's interquartile mean with its 95 % stratified bootstrap interval
  (:func:`llm_policy_gen.plotting.stats.iqm_interval`), drawn only over :data:`MIN_SEEDS` or more seeds and labelled
  with their number; fewer seeds give the median alone;
- **met k/n**: the seeds whose judged value meets the goal; the goal is met when the median of the judged values
  meets it and at least the task's ``need`` seeds do. A seed's judged value is its held-out mean as of the last
  iteration that ended within the budget where the run reports one (``heldout_within``: a run may pass its budget
  in its last iteration, by at most one iteration's episodes), else its final held-out mean;
- the same against gymnasium's ``reward_threshold`` where the task has one, and a score **normalised** from the
  uniform random policy (0) to that threshold (1): ``(return - R) / (threshold - R)``, ``R`` the random policy's
  mean on the same seed's held-out episodes (``references.json``); none where gymnasium gives no threshold;
- the counted episodes and environment steps (medians over the seeds) and the code versions that made the records.
"""

from __future__ import annotations

import statistics
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..plotting.stats import Interval, iqm_interval, normalized
from .definition import Suite, Task
from .store import SuiteRecord

__all__ = ["MIN_SEEDS", "Summary", "summarize", "summaries", "fmt", "seeds_text", "method_order", "wrap"]

MIN_SEEDS = 5
"""An interval is drawn only over this many seeds or more."""


def fmt(x: float | None, task: Task) -> str:
    """A figure as the tables print it: two decimals for a goal under 10 in size, else one; ``-`` for None."""
    if x is None or not np.isfinite(x):
        return "-"
    return f"{x:,.{2 if abs(task.goal) < 10 else 1}f}"


def seeds_text(seeds: Sequence[int]) -> str:
    s = sorted(seeds)
    if len(s) > 1 and s == list(range(s[0], s[-1] + 1)):
        return f"{s[0]}-{s[-1]}"
    return ",".join(map(str, s)) or "none"


def wrap(line: str) -> str:
    """A Markdown paragraph line wrapped at 120 characters for the source's reader (a table row, never)."""
    if line.startswith("|") or len(line) <= 120:
        return line
    return textwrap.fill(line, width=120, break_long_words=False, break_on_hyphens=False)


def _median(xs: Sequence[float | None]) -> float | None:
    vals = [float(x) for x in xs if x is not None]
    return statistics.median(vals) if vals else None


@dataclass(frozen=True)
class Summary:
    task: Task
    method: str
    seeds: tuple[int, ...]
    values: tuple[float, ...]
    """Each seed's held-out mean (the reported policy's)."""
    judged: tuple[float, ...]
    """Each seed's judged value (within the budget where the run reports it)."""
    normalised: tuple[float, ...] | None
    episodes: float | None
    steps: float | None
    codes: tuple[str, ...]
    sources: tuple[str, ...]
    """Peers' hyperparameter sources."""
    final: tuple[float, ...] | None = None
    """Each seed's final policy's held-out mean, when every seed's record has one."""
    selected: tuple[float, ...] | None = None
    """Each seed's selected policy's held-out mean (chosen with counted episodes), when every seed's record has one."""

    @property
    def n(self) -> int:
        return len(self.values)

    @cached_property
    def iqm(self) -> Interval | None:
        return iqm_interval(self.values) if self.n >= MIN_SEEDS else None

    @cached_property
    def norm_iqm(self) -> Interval | None:
        return iqm_interval(self.normalised) if self.normalised is not None and self.n >= MIN_SEEDS else None

    @property
    def median(self) -> float | None:
        return _median(self.values)

    @property
    def judged_median(self) -> float | None:
        return _median(self.judged)

    def met(self) -> int:
        return sum(self.task.meets(v) for v in self.judged)

    def goal_met(self) -> bool:
        return self.task.meets(self.judged_median) and self.met() >= self.task.need

    def threshold_met_count(self) -> int | None:
        t = self.task.threshold
        return None if t is None else sum(v >= t - 1e-9 for v in self.judged)

    def threshold_met(self) -> bool | None:
        t, med, k = self.task.threshold, self.judged_median, self.threshold_met_count()
        if t is None or k is None:
            return None
        return med is not None and med >= t - 1e-9 and k >= self.task.need

    def centre(self, digits_task: Task | None = None) -> str:
        """The IQM with its interval and n (5 or more seeds), else the median with n."""
        task = digits_task or self.task
        iv = self.iqm
        if iv is not None:
            return f"{fmt(iv.estimate, task)} [{fmt(iv.low, task)}, {fmt(iv.high, task)}] (n={self.n})"
        return f"median {fmt(self.median, task)} (n={self.n}, no interval)"

    def norm_text(self) -> str:
        if self.normalised is None:
            return "none" if self.task.yardstick is None else "-"
        iv = self.norm_iqm
        if iv is not None:
            return f"{iv.estimate:.2f} [{iv.low:.2f}, {iv.high:.2f}]"
        return f"median {statistics.median(self.normalised):.2f}"

    def policy_text(self, which: str) -> str:
        """``final`` or ``selected``: the IQM [95% CI] over 5 or more seeds, else the median; ``-`` when not every
        seed's record gives it (a method that does not select has no selected policy)."""
        values = self.final if which == "final" else self.selected
        if not values:
            return "-"
        if len(values) >= MIN_SEEDS:
            iv = iqm_interval(values)
            return f"{fmt(iv.estimate, self.task)} [{fmt(iv.low, self.task)}, {fmt(iv.high, self.task)}]"
        return f"median {fmt(_median(values), self.task)}"

    def met_text(self) -> str:
        return f"{self.met()}/{self.n}"


def summarize(task: Task, method: str, records: Sequence[SuiteRecord],
              random_policy: Mapping[int, float]) -> Summary:
    """The summary of ``records`` (one task and method, one record a seed)."""
    rs = sorted((r for r in records if r.heldout is not None), key=lambda r: r.seed)
    values = tuple(float(r.heldout) for r in rs if r.heldout is not None)
    judged = tuple(float(r.result["heldout_within"]) if r.result.get("heldout_within") is not None else v
                   for r, v in zip(rs, values, strict=True))
    norm = None
    if task.yardstick is not None and rs and all(r.seed in random_policy for r in rs):
        got = normalized(values, [random_policy[r.seed] for r in rs], task.yardstick)
        norm = None if got is None else tuple(float(x) for x in got)
    return Summary(task=task, method=method, seeds=tuple(r.seed for r in rs), values=values, judged=judged,
                   normalised=norm, episodes=_median([r.result.get("episodes") for r in rs]),
                   steps=_median([r.result.get("env_steps") for r in rs]),
                   codes=tuple(sorted({r.code or "unknown" for r in rs})),
                   sources=tuple(sorted({str(r.result["peer_source"]) for r in rs if r.result.get("peer_source")})),
                   final=_all(rs, "final_heldout_mean"), selected=_all(rs, "selected_heldout_mean"))


def _all(records: Sequence[SuiteRecord], key: str) -> tuple[float, ...] | None:
    """Each record's ``result[key]``, when every record has one."""
    values = [r.result.get(key) for r in records]
    if not values or any(v is None for v in values):
        return None
    return tuple(float(v) for v in values if v is not None)


def method_order(suite: Suite, records: Sequence[SuiteRecord]) -> list[str]:
    """The suite's methods in its order, then the others with records, in the order they first appear."""
    labels = [m.label for m in suite.methods]
    return labels + [m for m in dict.fromkeys(r.method for r in records) if m not in labels]


def summaries(suite: Suite, records: Sequence[SuiteRecord],
              random_policy: Mapping[str, Mapping[int, float]]) -> list[Summary]:
    """One summary per task and method with records, in the suite's task order and :func:`method_order`."""
    out = []
    for task in suite.tasks:
        mine = [r for r in records if r.task == task.key]
        for method in method_order(suite, mine):
            rs = [r for r in mine if r.method == method]
            if rs:
                out.append(summarize(task, method, rs, random_policy.get(task.key, {})))
    return out
