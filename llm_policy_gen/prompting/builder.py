"""Building the messages a backend sees, from templates under ``prompting/prompts/``.

The prompt holds the task and its reward, the meaning of every bin and action, the physics hints, the scores of
earlier proposals (deduplicated, rounded to the precision shown, best last, as OPRO does), the episodes, per-state
evidence, the current table and the exact output format. Which episodes (``--evidence``): the best and worst ones,
their last steps only (``extremes``, the default); statistics of the recent episodes -- returns, lengths, how they
ended, per observation dimension the mean, spread and range of the values visited and their mean where the episodes
ended -- and the median episode by return (``summary``: R2PO found that a model shown single best and worst episodes
fixates on single failures); or both. Its size is bounded: episode excerpts have a fixed length, and evidence rows are
added only while the prompt stays under ``max_chars`` characters, or, for a backend that knows its model's tokenizer
(:meth:`PromptBuilder.measure_in_tokens`), under a number of tokens: the same cuts, measured by the tokenizer. With
``summary`` or ``both``, lines of the episode section are cut the same way (last lines first) when the prompt would
pass the cap even without evidence rows.

What the prompt shows of the table and the evidence, the answer format decides through its capabilities
(:class:`~llm_policy_gen.formats.base.AnswerFormat`), never its name. With the ``rules`` answer format the table may be
far too big to print (Hopper over all eleven observations), so it does not show it (``shows_table``): the current
table appears as the rules it was compiled from; and it summarises the evidence (``summarises_evidence``): per
dimension (for each bin: its share of the steps, their mean discounted return-to-go, how often episodes ended there),
with episode steps naming their bins instead of a flat state index.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from string import Template
from typing import Any

import numpy as np

from ..clients.base import Message
from ..collect import Episode
from ..discretize import ActionDiscretizer, BoxDiscretizer
from ..envs.spec import EnvSpec
from ..formats.base import table_dims
from ..schema.aliases import template_fields
from ..storage.templates import prompts_dir, template
from .context import HistoryEntry, IterationState, PromptContext
from .evidence_text import bin_values, dimension_lines, evidence_by_dimension, num
from .memory import episode_stats, median_episode
from .table_text import entry_text, table_text

__all__ = ["HistoryEntry", "IterationState", "PromptContext", "PromptBuilder", "prompts_dir", "CHARS_PER_TOKEN",
           "default_token_cap", "EVIDENCE_KINDS"]

#: What ``--evidence`` accepts: which episodes the prompt shows (see the module docstring).
EVIDENCE_KINDS = ("extremes", "summary", "both")

#: Characters per token of this project's prompts (digits, bin ranges, JSON): a 12,000-character prompt was about 6,100
#: tokens of Qwen2.5's tokenizer (issue 18). Turns the character cap into tokens for :func:`default_token_cap`.
CHARS_PER_TOKEN = 2


def default_token_cap(max_chars: int, context_tokens: int | None, max_output_tokens: int) -> int:
    """The prompt's token cap when none is given: the smaller of the character cap in tokens and the context less
    room for the answer (``max_output_tokens``, at most half the context)."""
    cap = max_chars // CHARS_PER_TOKEN
    if context_tokens:
        cap = min(cap, context_tokens - min(max_output_tokens, context_tokens // 2))
    return max(1, cap)


@dataclass(frozen=True)
class _TableMemo:
    """The last table :meth:`PromptBuilder.table` wrote, with what its text depends on."""

    key: tuple[Any, ...]
    table: np.ndarray
    text: str


class PromptBuilder:
    """Renders :class:`PromptContext` into messages with the templates of ``prompting/prompts/``."""

    def __init__(
        self,
        templates: Path | None = None,
        max_chars: int = 12000,
        steps_per_episode: int = 12,
        history_len: int = 12,
        evidence: str = "extremes",
        recent_episodes: int = 20,
    ) -> None:
        if evidence not in EVIDENCE_KINDS:
            raise ValueError(f"bad evidence {evidence!r}: accepted {', '.join(EVIDENCE_KINDS)}")
        self.dir = Path(templates) if templates else prompts_dir()
        self.evidence = evidence
        """Which episodes the prompt shows: ``extremes``, ``summary`` or ``both`` (see the module docstring)."""
        self.recent_episodes = int(recent_episodes)
        """How many of the latest episodes the summary describes."""
        self.max_chars = int(max_chars)
        self.steps_per_episode = int(steps_per_episode)
        self.history_len = int(history_len)
        self.limit = self.max_chars
        """The prompt's cap, in the unit :meth:`size` measures."""
        self.size: Callable[[str], int] = len
        """The size of a text: characters, or tokens after :meth:`measure_in_tokens`."""
        self.unit = "characters"
        self._table_memo: _TableMemo | None = None

    def measure_in_tokens(self, max_tokens: int, count_tokens: Callable[[str], int]) -> None:
        """Measure prompts with ``count_tokens`` and cap them at ``max_tokens`` (the cuts stay the same)."""
        self.limit, self.size, self.unit = int(max_tokens), count_tokens, "tokens"

    def template(self, name: str) -> str:
        return template(name, self.dir)

    # ------------------------------------------------------------------ sections
    def hints(self, spec: EnvSpec) -> str:
        if spec.hints_text:
            return spec.hints_text.strip()
        if not spec.hints:
            return "(none for this task)"
        p = self.dir / "hints" / spec.hints
        return p.read_text(encoding="utf-8").strip() if p.is_file() else "(none for this task)"

    def state_meaning(self, ctx: PromptContext) -> str:
        obs = ctx.observation
        lines = obs.describe_dims()
        if isinstance(obs, BoxDiscretizer):
            shape = " x ".join(str(b) for b in obs.bins)
            order = " then ".join(d.name for d in obs.dims)
            lines.append(
                f"state = flat row-major index of the bin tuple ({shape} bins, {order}; the last dimension varies "
                "fastest). Values outside a dimension's range fall into its first or last bin."
            )
        return "\n".join(lines)

    def task_fields(self, spec: EnvSpec, actions: ActionDiscretizer) -> dict[str, Any]:
        """The template fields that describe the task and its actions (shared by table and direct prompts)."""
        return {
            "title": spec.title or spec.env_id,
            "env_id": spec.env_id,
            "description": spec.description or f"The gymnasium environment {spec.env_id}.",
            "reward": spec.reward or "as defined by the environment",
            "n_actions": actions.n_actions,
            "action_meaning": "\n".join(f"{a}: {actions.describe(a)}" for a in range(actions.n_actions)),
            "hints": self.hints(spec),
        }

    def history(self, ctx: PromptContext) -> str:
        """Earlier candidates' test means, deduplicated (equal outcomes at the precision shown), best last."""
        if not ctx.history:
            return "(no earlier candidates yet)"
        seen: dict[tuple[str, bool], HistoryEntry] = {}
        for h in ctx.history[-self.history_len * 4 :]:
            seen[(num(h.test_mean), h.accepted)] = h  # keep the latest of equal outcomes
        entries = sorted(seen.values(), key=lambda h: (-1e18 if h.test_mean is None else h.test_mean, h.iteration))
        out = []
        for h in entries[-self.history_len :]:
            who = f"iteration {h.iteration}" + (f" candidate {h.candidate}" if ctx.candidates > 1 else "")
            if h.test_mean is None:
                out.append(f"{who}: refused ({h.note or 'invalid answer'})")
                continue
            if h.accepted:
                verdict = "kept as best"
            elif h.confirmed is False:
                verdict = "best on the test episodes but not confirmed on fresh episodes, reverted"
            else:
                verdict = "not better, reverted"
            out.append(f"{who}: {num(h.test_mean)} on {h.test_episodes} episodes, {verdict}, "
                       f"{h.n_changed} states changed")
        return "\n".join(out)

    def episode_text(self, ep: Episode, label: str, sizes: tuple[int, ...] | None = None) -> str:
        """One episode's last steps; with ``sizes`` (the table's dimensions) each state is shown as its bins."""
        end = "terminated" if ep.terminated else ("time limit" if ep.truncated else "cut")
        k = self.steps_per_episode
        start = max(0, ep.length - k)

        def state(s: int) -> str:
            if sizes is None:
                return str(int(s))
            bins = np.unravel_index(int(s), sizes)
            return "".join(str(int(b)) for b in bins) if max(sizes) <= 10 else "-".join(str(int(b)) for b in bins)

        steps = " ".join(
            f"{t}:{state(ep.states[t])}:{int(ep.actions[t])}:{ep.rewards[t]:.3g}" for t in range(start, ep.length)
        )
        what = "bins" if sizes is not None else "state"
        return (
            f"- {label}: return {num(ep.ret)}, {ep.length} steps, {end}. Last steps (t:{what}:action:reward): {steps}"
        )

    def episodes(self, ctx: PromptContext) -> str:
        return "\n".join(self.episode_lines(ctx))

    def episode_lines(self, ctx: PromptContext) -> list[str]:
        """The episode section, one line each: a header, then per :attr:`evidence` the summary of the recent
        episodes with the median one, and the best and worst episodes (the lines a cut drops first come last)."""
        mem = ctx.memory
        if not len(mem):
            return ["(no episodes yet)"]
        lines = [f"{len(mem)} episodes in memory."]
        by_bins = ctx.fmt.summarises_evidence and len(table_dims(ctx.observation)) > 1
        sizes = table_dims(ctx.observation) if by_bins else None
        if sizes is not None:
            lines[0] += " States are shown as their bins, one digit (or number) per dimension in order."
        if self.evidence != "extremes":
            lines += self.summary_lines(ctx, sizes)
        if self.evidence != "summary":
            best = mem.best(ctx.best_k)
            worst = [e for e in mem.worst(ctx.worst_k) if all(e is not b for b in best)]
            for i, ep in enumerate(best):
                lines.append(self.episode_text(ep, f"best {i + 1} (iteration {ep.iteration})", sizes))
            for i, ep in enumerate(worst):
                lines.append(self.episode_text(ep, f"worst {i + 1} (iteration {ep.iteration})", sizes))
        return lines

    def summary_lines(self, ctx: PromptContext, sizes: tuple[int, ...] | None = None) -> list[str]:
        """Statistics of the last :attr:`recent_episodes` episodes and the median one (by return) of them."""
        recent = [e for e in ctx.memory.recent(self.recent_episodes) if e.length]
        if not recent:
            return []
        obs = ctx.observation
        values, unit = bin_values(obs)
        st = episode_stats(recent, table_dims(obs), values)
        r, n = st.returns, len(recent)
        first, last = min(e.iteration for e in recent), max(e.iteration for e in recent)
        when = f"iteration {first}" if first == last else f"iterations {first}-{last}"
        cut = n - st.terminated - st.truncated
        lines = [
            f"Summary of the last {n} episodes ({when}): return mean {num(float(r.mean()))}, median "
            f"{num(float(np.median(r)))}, std {num(float(r.std()))}, min {num(float(r.min()))}, max "
            f"{num(float(r.max()))}; length mean {num(float(st.lengths.mean()))} steps, min {int(st.lengths.min())}, "
            f"max {int(st.lengths.max())}; ended: {st.terminated} terminated, {st.truncated} at the time limit"
            + (f", {cut} cut" if cut else "") + ".",
        ]
        median = median_episode(recent)
        assert median is not None
        lines.append(self.episode_text(median, f"median episode (iteration {median.iteration})", sizes))
        return lines + dimension_lines(st, obs, unit)

    def evidence_rows(self, ctx: PromptContext) -> list[str]:
        if ctx.fmt.summarises_evidence:
            return evidence_by_dimension(ctx.evidence, ctx.observation)
        ev = ctx.evidence
        order = np.argsort(-ev.visits, kind="stable")
        rows = []
        for s in order:
            if ev.visits[s] == 0:
                break
            parts = []
            for a in range(ev.counts.shape[1]):
                if ev.counts[s, a] > 0:
                    parts.append(f"a{a} {int(ev.counts[s, a])}x {ev.q_mean[s, a]:.3g}")
            cur = ctx.current_table[s]
            now = f"a{int(cur)}" if ctx.target.kind == "action" else entry_text(cur)
            rows.append(f"s{int(s)} | {int(ev.visits[s])} | " + ", ".join(parts) + f" | now {now}")
        return rows

    def table(self, ctx: PromptContext) -> str:
        """The current table, as rows when it fits a third of the budget, else as regions of equal action; with
        rules answers, the rules it was compiled from (or, for a table that was not, a decision list equal to it).

        The text of the last table is kept: between adoptions the current table does not change, and writing a big
        table as regions or rules takes seconds (9 s for a Hopper-v5.rich table of 560,000 states)."""
        table = np.asarray(ctx.current_table)
        # the source (the rules) is copied, so that the key stays what the text was written from
        key = (ctx.observation.to_spec(), ctx.target, copy.deepcopy(ctx.current_source), self.limit, self.size,
               type(ctx.fmt), ctx.fmt.shows_table)
        memo = self._table_memo
        if (memo is not None and memo.key == key and memo.table.dtype == table.dtype
                and np.array_equal(memo.table, table)):
            return memo.text
        text = table_text(table, ctx.observation, ctx.target, self.limit // 3, self.size, ctx.current_source,
                          fmt=ctx.fmt)
        self._table_memo = _TableMemo(key, table.copy(), text)
        return text

    # ------------------------------------------------------------------ assembly
    def fields(self, ctx: PromptContext) -> dict[str, Any]:
        """Every template field of a proposal prompt, evidence excepted."""
        return {
            **self.task_fields(ctx.spec, ctx.actions),
            **ctx.sections,
            "n_states": ctx.observation.n_states,
            "state_meaning": self.state_meaning(ctx),
            "test_episodes": ctx.test_episodes,
            "best_test": num(ctx.best_test_mean),
            "history": self.history(ctx),
            "iteration": ctx.iteration,
            "episodes": self.episodes(ctx),
            "gamma": ctx.evidence.gamma,
            "table": self.table(ctx),
            "format": ctx.fmt.prompt_section(ctx.format_context()),
        }

    def build(self, ctx: PromptContext) -> list[Message]:
        """System + user messages for one proposal, with the prompt under the cap (:attr:`limit`) when possible.

        ``ctx.templates`` names the (system, user) templates (each mode has its own pair).
        """
        system, user = ctx.templates
        fields = template_fields(self.fields(ctx))
        tmpl = Template(self.template(user))
        system_text = self.template(system)
        rows = self.evidence_rows(ctx)
        base = tmpl.safe_substitute(fields, evidence="")
        if self.evidence != "extremes":  # the episode lines are cut like evidence rows when even they do not fit
            lines = self.episode_lines(ctx)
            shown = len(lines)
            whole = self.size("\n".join(rows)) if ctx.fmt.summarises_evidence else 0  # rows never cut
            while shown > 1 and self.size(base) + whole + self.size(system_text) + 40 > self.limit:
                shown -= 1
                fields["episodes"] = "\n".join(
                    [*lines[:shown], f"({len(lines) - shown} lines left out to fit the prompt's cap)"])
                base = tmpl.safe_substitute(fields, evidence="")
        # Per-dimension summaries (rules answers) are one line per dimension: always kept whole.
        budget = 10**9 if ctx.fmt.summarises_evidence else self.limit - self.size(base) - self.size(system_text) - 40
        kept: list[str] = []
        used = 0
        for r in rows:
            size = self.size(r) + 1
            if used + size > budget:
                break
            kept.append(r)
            used += size
        if len(kept) < len(rows):
            kept.append(f"({len(rows) - len(kept)} less visited states left out)")
        evidence = "\n".join(kept) if kept else "(no steps yet)"
        return [Message("system", system_text), Message("user", tmpl.safe_substitute(fields, evidence=evidence))]

    def repair(self, errors: list[str]) -> str:
        return Template(self.template("repair.md")).safe_substitute(errors="\n".join(f"- {e}" for e in errors))
