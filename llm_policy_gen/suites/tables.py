"""A suite's tables from its records, in Markdown, CSV and LaTeX (:func:`write_tables`).

Only the current records are shown (:mod:`.current`: the newest record of each cell the suite asks for today); the
figures of each task and method are :mod:`.summary`'s (per-seed values always, an IQM with its 95 % interval only
over 5 or more seeds, met k/n against our goal and gymnasium's threshold, the normalised score, counted episodes and
steps, the code versions); pooled figures only over a common task set (:mod:`.pooled`).

Files written under ``out``: ``SUITE.md`` (the tables as a Markdown fragment, which ``docs/results.md`` embeds),
``SUITE.csv`` (one row per task and method), ``SUITE_seeds.csv`` (one row per record) and ``SUITE.tex`` (the summary
as a LaTeX ``tabular``, booktabs rules); a suite's extra tables (``drift``, ``answers``: :mod:`.extra_tables`) follow
in the Markdown and each has its ``SUITE_NAME.csv``. A suite that chooses settings (a ``[choice]``) writes its grids
and choices instead (:mod:`.choice`): ``SUITE.md`` (``docs/tuning.md`` embeds it), ``SUITE.csv`` (one row per task and
point) and ``SUITE_seeds.csv``.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from pathlib import Path

from ..plotting.stats import Interval
from .current import current_records
from .definition import Suite
from .extra_tables import render_extra
from .pooled import pooled
from .references import References, read_references
from .store import SuiteRecord
from .summary import MIN_SEEDS, Summary, fmt, seeds_text, summaries, wrap

__all__ = ["write_tables", "render_tables", "shown_rows", "shipped_references"]


def shipped_references(suite: Suite) -> References:
    """The references committed beside a shipped suite's records (none for a suite of the user's)."""
    from importlib import resources

    folder = resources.files(__package__).joinpath("data", suite.name)
    return read_references(Path(str(folder)))


def _yes(flag: bool | None) -> str:
    return "-" if flag is None else ("**yes**" if flag else "no")


def _goal_text(s: Summary) -> str:
    return f"{'=' if s.task.exact else '>='} {fmt(s.task.goal, s.task)}"


SUMMARY_HEADER = ["task", "method", "goal", "goal met (seeds)", "gymnasium threshold", "threshold met (seeds)",
                  "held-out IQM [95% CI] (n)", "final policy", "selected policy", "judged median", "normalised IQM",
                  "episodes", "env steps", "code"]


def _summary_row(s: Summary) -> list[str]:
    t = s.task
    k = s.threshold_met_count()
    return [t.env_id, s.method, _goal_text(s), f"{_yes(s.goal_met())} ({s.met_text()})",
            "none" if t.threshold is None else fmt(t.threshold, t),
            "-" if k is None else f"{_yes(s.threshold_met())} ({k}/{s.n})", s.centre(), s.policy_text("final"),
            s.policy_text("selected"), fmt(s.judged_median, t),
            s.norm_text(), "-" if s.episodes is None else f"{s.episodes:,.0f}",
            "-" if s.steps is None else f"{s.steps:,.0f}", ", ".join(s.codes)]


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows)]


def _markdown(suite: Suite, rows: Sequence[Summary], extra: Sequence[str] = ()) -> str:
    lines = [f"Suite `{suite.name}` ({suite.title}): {len({r.task.key for r in rows})} of {len(suite.tasks)} tasks "
             f"with records, {sum(r.n for r in rows)} runs. A goal is met when the median of the seeds' judged values "
             "meets it and at least the task's `need` seeds do (8 of 10, 4 of 5); gymnasium's threshold is judged "
             "the same way. A seed's judged value is its held-out mean as of the last iteration within the budget "
             f"where the run reports one, else its final held-out mean. IQM: rliable's interquartile mean of the "
             f"final held-out means with its 95% stratified bootstrap interval (2,000 resamples, seed 0), drawn only "
             f"over {MIN_SEEDS} or more seeds and labelled with n; fewer seeds give the median. Final policy: the "
             "policy a run ends with (for a method whose keeper is the method, the kept table); selected policy: the "
             "one it chose with counted episodes (the kept table, a peer's best evaluation); `-` where not every "
             "seed's record gives it (records made before issue 62 give no final figure for q-learning). "
             "Normalised: (return "
             "- R) / (Y - R), R the uniform random policy's mean on the seed's held-out episodes, Y gymnasium's "
             "threshold, else a published figure that is not ours, cited in the suite file (the RL Baselines3 Zoo's "
             "benchmark, a known optimum); none where neither exists. Episodes and steps: medians of the "
             "counted interaction. Code: the version that made the records (`unknown` for records imported from "
             "the old bench files).", ""]
    lines += _md_table(SUMMARY_HEADER, [_summary_row(s) for s in rows])
    cited = [t for t in suite.tasks if t.threshold is None and t.reference is not None]
    if cited:
        lines += ["", "Where gymnasium has no threshold, the normalised score's 1 is a figure that is not ours, "
                  "transcribed and cited, never a result run here: " + "; ".join(
                      f"{t.env_id} {t.reference:g} ({t.reference_source})" for t in cited) + "."]
    lines += ["", "Per seed (held-out mean of each seed, in seed order; a peer's hyperparameter source):", ""]
    lines += _md_table(["task", "method", "seeds", "per seed", "source"],
                       [[s.task.env_id, s.method, seeds_text(s.seeds), ", ".join(fmt(v, s.task) for v in s.values),
                         "; ".join(s.sources) or "-"] for s in rows])
    pool = [p for m in dict.fromkeys(r.method for r in rows) if m != "offline"
            if (p := pooled(rows, "offline", m)) is not None]
    if pool:
        lines += ["", "Pooled (normalised IQM [95% CI] over the tasks both methods ran on every judged seed, with a "
                  "gymnasium threshold, judged on the same seeds; seeds resampled within each task):", ""]
        lines += _md_table(["methods", "tasks", "seeds", "offline", "other"],
                           [[f"offline vs {p.methods[1]}", ", ".join(p.tasks), seeds_text(p.seeds),
                             p.intervals[0].format(2), p.intervals[1].format(2)] for p in pool])
    lines += extra
    return "\n".join(wrap(line) for line in lines) + "\n"


def _choice_tables(suite: Suite, records: Sequence[SuiteRecord], refs: References) -> dict[str, str]:
    """A settings search's tables: per task every point of its grid and the point chosen (:mod:`.choice`), in
    Markdown and CSV, and the records per seed."""
    from .choice import choice_markdown, choice_rows, choices

    made = choices(suite, records)

    lines = [f"Suite `{suite.name}` ({suite.title}): {len(suite.tasks)} tasks, {len(suite.methods)} points, "
             f"{len(records)} runs on the tuning seeds. A point's seeds met and IQM are over each seed's judged value "
             "(the held-out mean as of the last iteration within the budget where the run reports one, else the "
             "final held-out mean); the IQM's interval is rliable's 95% stratified bootstrap (2,000 resamples, seed 0)."
             + (f" A point beats the base `{suite.choice.base}` when it meets the goal on more seeds, or on as many "
                "with the lower end of its IQM's interval above the base's IQM; the chosen point is the best (seeds "
                "met, then IQM) of those that beat it, else the base." if suite.choice and suite.choice.base else
                " The chosen point is the one with the most seeds at the goal, then the highest IQM.")
             + (" A change runs one seed at a time once the base has run every seed, and stops once it has missed "
                "the goal on more seeds than the base missed in all (it cannot beat the base then); its figures are "
                "over the seeds it ran." if suite.choice and suite.choice.stop else ""),
             *choice_markdown(made)]
    return {f"{suite.name}.md": "\n".join(wrap(line) for line in lines) + "\n",
            f"{suite.name}.csv": _csv(choice_rows(made)), f"{suite.name}_seeds.csv": _seeds_csv(records, refs)}


def _csv(rows: list[list[object]]) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return buf.getvalue()


def _num(x: float | None) -> str:
    return "" if x is None else f"{x:.6g}"


def _iv(iv: Interval | None) -> list[str]:
    return ["", "", ""] if iv is None else [_num(iv.estimate), _num(iv.low), _num(iv.high)]


def _summary_csv(rows: Sequence[Summary]) -> str:
    out: list[list[object]] = [["task", "env_id", "method", "n", "seeds", "iqm", "iqm_low", "iqm_high",
                                "judged_median", "met", "need", "goal", "goal_met", "threshold", "threshold_met",
                                "normalised_iqm", "normalised_low", "normalised_high", "episodes_median",
                                "env_steps_median", "code", "source"]]
    for s in rows:
        iv, nv, t = s.iqm, s.norm_iqm, s.task
        out.append([t.key, t.env_id, s.method, s.n, seeds_text(s.seeds), *_iv(iv), _num(s.judged_median), s.met(),
                    t.need, _num(t.goal), s.goal_met(), _num(t.threshold),
                    "" if s.threshold_met() is None else s.threshold_met(), *_iv(nv), _num(s.episodes),
                    _num(s.steps), " ".join(s.codes), "; ".join(s.sources)])
    return _csv(out)


def _seeds_csv(records: Sequence[SuiteRecord], refs: References) -> str:
    out: list[list[object]] = [["task", "env_id", "method", "seed", "heldout_mean", "heldout_within", "episodes",
                                "env_steps", "random_policy", "code", "source", "cell"]]
    for r in records:
        res = r.result
        out.append([r.task, r.env_id, r.method, r.seed, _num(r.heldout), _num(res.get("heldout_within")),
                    _num(res.get("episodes")), _num(res.get("env_steps")),
                    _num(refs.random_policy.get(r.task, {}).get(r.seed)), r.code, r.source, r.cell])
    return _csv(out)


def _tex(rows: Sequence[Summary]) -> str:
    def esc(text: str) -> str:
        for a, b in (("\\", "\\textbackslash{}"), ("&", "\\&"), ("%", "\\%"), ("_", "\\_"), ("#", "\\#"),
                     ("*", ""), (">=", "$\\geq$")):
            text = text.replace(a, b)
        return text

    cols = ["task", "method", "goal", "goal met", "threshold", "threshold met", "held-out IQM [95\\% CI] (n)",
            "final", "selected", "normalised", "episodes", "steps"]
    lines = ["\\begin{tabular}{" + "l" * 6 + "r" * 6 + "}", "\\toprule", " & ".join(cols) + " \\\\", "\\midrule"]
    for s in rows:
        cells = [esc(c) for i, c in enumerate(_summary_row(s)) if i not in (9, 13)]
        lines.append(" & ".join(cells) + " \\\\")
    lines += ["\\bottomrule", "\\end{tabular}"]
    return "\n".join(lines) + "\n"


def shown_rows(suite: Suite, records: Sequence[SuiteRecord], refs: References,
               fresh: bool = False) -> tuple[list[SuiteRecord], list[Summary]]:
    """The current records (in the suite's task order, then method and seed) and their summaries, on the judged
    seeds or (``fresh``) on the fresh ones."""
    shown = current_records(suite, records, fresh)
    order = {t.key: i for i, t in enumerate(suite.tasks)}
    shown = sorted(shown, key=lambda r: (order.get(r.task, len(order)), r.method, r.seed))
    return shown, summaries(suite, shown, refs.random_policy)


def render_tables(suite: Suite, records: Sequence[SuiteRecord], references: References | None = None,
                  shown: tuple[list[SuiteRecord], list[Summary]] | None = None) -> dict[str, str]:
    """The tables' files by name (``SUITE.md``, ``SUITE.csv``, ``SUITE_seeds.csv``, ``SUITE.tex``) and their text
    (``shown``: :func:`shown_rows` of the records, when the caller has them)."""
    refs = references if references is not None else shipped_references(suite)
    records_shown, rows = shown if shown is not None else shown_rows(suite, records, refs)
    if suite.choice is not None:  # a settings search: its grids and choices (no summary of every point)
        return _choice_tables(suite, records_shown, refs)
    extra, extra_files = render_extra(suite, records_shown)  # the tables the suite asks for beside these
    return {f"{suite.name}.md": _markdown(suite, rows, extra), f"{suite.name}.csv": _summary_csv(rows),
            f"{suite.name}_seeds.csv": _seeds_csv(records_shown, refs), f"{suite.name}.tex": _tex(rows),
            **extra_files}


def write_tables(suite: Suite, records: Sequence[SuiteRecord], out: Path,
                 references: References | None = None) -> list[Path]:
    """Write the suite's tables under ``out`` from ``records``; returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in render_tables(suite, records, references).items():
        path = out / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
