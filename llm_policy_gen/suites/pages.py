"""The published pages, generated from the committed records (issue 61 items 3 and 4): :func:`render_pages`.

Each shipped suite's store (``llm_policy_gen/suites/data/SUITE/records.jsonl`` with its ``references.json``) gives

- the README's results block, between ``<!-- results:begin -->`` and ``<!-- results:end -->`` (the ``goals``
  suite: one table with fixed columns, the rule stated once, the figure, a line on coverage, links);
- ``docs/results.md``'s block of the suite, between ``<!-- SUITE:begin -->`` and ``<!-- SUITE:end -->`` (the
  tables of :mod:`.tables`; the hand-written text around the blocks stays); ``docs/tuning.md``'s for a suite that
  chooses settings (``tune``, ``qlearning-tune``: each task's grid and the point chosen);
- ``docs/tables/SUITE.csv``, ``SUITE_seeds.csv`` and ``SUITE.tex``;
- ``docs/img/SUITE_normalised.png`` (:mod:`.figure`; not compared by the test of the published figures).

``llm-policy-gen bench SUITE --render`` calls :func:`render_pages`; ``python tools/render_pages.py`` too. The test
``tests/test_published_figures.py`` regenerates every page but the PNGs with :func:`generated_pages` and fails on
any difference from the files committed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..errors import UserError
from .definition import Suite, Task, load_suite, suite_names
from .references import read_references
from .store import RECORDS, read_records
from .summary import Summary, seeds_text, wrap
from .tables import render_tables, shown_rows

__all__ = ["README_BLOCK", "generated_pages", "render_pages", "fill_block", "readme_block", "store_folder",
           "stale_pages"]

README_BLOCK = "results"
TUNING = Path("docs", "tuning.md")
"""The page of the suites that choose settings (a ``[choice]``): their grids and choices, not results."""
LM_POLICY = "lm-policy"
"""The label of the language-model policy's method in a suite (none has records yet: issue 62)."""


def store_folder(root: Path, suite: str) -> Path:
    return root / "llm_policy_gen" / "suites" / "data" / suite


def fill_block(text: str, name: str, body: str, where: str) -> str:
    """``text`` with the block ``name`` (between its begin and end markers) holding ``body``."""
    pattern = re.compile(rf"(<!-- {re.escape(name)}:begin[^>]*-->\n).*?(<!-- {re.escape(name)}:end -->)", re.S)
    if not pattern.search(text):
        raise UserError(f"{where}: no <!-- {name}:begin --> ... <!-- {name}:end --> block to fill")
    return pattern.sub(lambda m: m.group(1) + body + m.group(2), text, count=1)


def _cell(row: Summary | None) -> str:
    if row is None:
        return "-"
    iv = row.iqm
    centre = (f"{_f(iv.estimate, row)} [{_f(iv.low, row)}, {_f(iv.high, row)}]" if iv is not None
              else f"median {_f(row.median, row)}")
    return f"{centre}, {row.met_text()}"


def _fresh_cell(row: Summary | None) -> str:
    return "not yet" if row is None else f"{_cell(row)}, met: {_yes(row.goal_met())}"


def _fresh_text(suite: Suite) -> str:
    sets = sorted({seeds_text(t.fresh_seeds) for t in suite.tasks if t.fresh_seeds}, reverse=True)
    return " or ".join(sets) or "none named"


def _f(x: float | None, row: Summary) -> str:
    from .summary import fmt

    return fmt(x, row.task)


def _yes(flag: bool | None) -> str:
    return "-" if flag is None else ("**yes**" if flag else "no")


def _peer_cell(by: Mapping[tuple[str, str], Summary], task: Task, suite: Suite) -> str:
    """The zoo-budget PPO cell; a spec variant's is its base task's runs (a peer reads raw observations)."""
    own = by.get((task.key, "ppo"))
    if own is not None or not task.variant_of:
        return _cell(own)
    base = by.get((task.variant_of, "ppo"))
    return "-" if base is None else f"{_cell(base)} ({suite.task(task.variant_of).env_id}'s runs)"


def readme_block(suite: Suite, rows: Sequence[Summary], fresh: Sequence[Summary] = ()) -> str:
    """The README's results block of ``suite`` (the goal table); ``fresh``: the summaries on the fresh seeds."""
    by = {(r.task.key, r.method): r for r in rows}
    again = {r.task.key: r for r in fresh if r.method == "offline"}
    seed_sets = sorted({(len(t.seeds), seeds_text(t.seeds), t.need) for t in suite.tasks}, reverse=True)
    long = [t.env_id for t in suite.tasks if len(t.seeds) != seed_sets[0][0]]
    seeds = f"seeds {seed_sets[0][1]}" + (f" ({seed_sets[1][1]} for {', '.join(long)})" if long else "")
    need = " or ".join(f"{k} of {n}" for n, _, k in seed_sets)
    lines = [
        f"`offline` (a fixed local search, not a language model) against each task's goal within its episode budget, "
        f"beside the RL Baselines3 Zoo's tuned PPO. Every run is a record in "
        f"[`records.jsonl`](llm_policy_gen/suites/data/{suite.name}/{RECORDS}); this block is generated from them. "
        f"Judged on {seeds}. A cell: rliable's IQM of the final held-out means (100 episodes) with its 95% "
        f"stratified bootstrap interval (intervals only over 5 or more seeds), then the seeds that meet our goal. "
        f"Met: the median and at least {need} seeds meet it (our goal / gymnasium's threshold). `offline`, fresh "
        f"seeds: judged again, last, on seeds no choice of settings has seen ({_fresh_text(suite)}).", "",
        "| task | goal | gymnasium threshold | `offline` | PPO, zoo budget | PPO at offline's steps | LM policy | "
        "offline met (goal / threshold) | `offline`, fresh seeds |",
        "|---|---|---|---|---|---|---|---|---|"]
    for t in suite.tasks:
        off = by.get((t.key, "offline"))
        met = "-" if off is None else f"{_yes(off.goal_met())} / {_yes(off.threshold_met())}"
        goal = f"{'=' if t.exact else '>='} {t.goal:,g} in {t.budget:,} episodes"
        lines.append(f"| {t.env_id} | {goal} | {'none' if t.threshold is None else f'{t.threshold:,g}'} | "
                     f"{_cell(off)} | {_peer_cell(by, t, suite)} | {_cell(by.get((t.key, 'ppo-at-offline')))} | "
                     f"{_cell(by.get((t.key, LM_POLICY)))} | {met} | {_fresh_cell(again.get(t.key))} |")
    met_goal = sum(1 for t in suite.tasks if (r := by.get((t.key, "offline"))) is not None and r.goal_met())
    peers = [t.env_id for t in suite.tasks if any((k, m) in by for k in (t.key, t.variant_of)
                                                  for m in ("ppo", "ppo-at-offline"))]
    variants = [f"{t.env_id} shares {suite.task(t.variant_of).env_id}'s" for t in suite.tasks if t.variant_of]
    lines += ["", f"`offline` meets {met_goal} of {len(suite.tasks)} goals. "
              f"![normalised score per task and method](docs/img/{suite.name}_normalised.png)", "",
              f"Coverage: zoo-tuned PPO has records on {len(peers)} of {len(suite.tasks)} tasks "
              f"({', '.join(peers) or 'none'}"
              + (f"; at the zoo's budget {', '.join(variants)} runs" if variants else "")
              + f"); DQN and SAC on some of them (see the results page); the language-model policy on none (its "
              f"figures return with records under the protocol issue, 62). Every cell not run yet is listed with its "
              f"projected interaction by `llm-policy-gen bench {suite.name} --list`.", "",
              "Every method, per seed, pooled figures and what limits the tasks that miss: [results](docs/results.md); "
              f"[CSV](docs/tables/{suite.name}.csv), [per seed](docs/tables/{suite.name}_seeds.csv), "
              f"[LaTeX](docs/tables/{suite.name}.tex); superseded and transcribed figures: "
              f"[history](docs/results-history.md)."]
    return "\n".join(wrap(line) for line in lines) + "\n"


def _shipped(root: Path) -> list[str]:
    return [name for name in suite_names() if (store_folder(root, name) / RECORDS).is_file()]


def generated_pages(root: Path) -> tuple[dict[Path, str], dict[str, list[Summary]]]:
    """Every generated page's text by path (the README and docs/results.md with their blocks filled, the CSV and
    LaTeX tables), from the records committed under ``root``; and each suite's summaries (for the figure)."""
    readme, results = root / "README.md", root / "docs" / "results.md"
    texts = {readme: readme.read_text(encoding="utf-8"), results: results.read_text(encoding="utf-8")}
    out: dict[Path, str] = {}
    rows_of: dict[str, list[Summary]] = {}
    names = _shipped(root)
    page_of = {name: (TUNING if load_suite(name).choice is not None else Path("docs", "results.md")) for name in names}
    for name in names:  # every block there before any figure is computed: a page without one is refused at once
        page = root / page_of[name]
        texts.setdefault(page, page.read_text(encoding="utf-8") if page.is_file() else "")
        fill_block(texts[page], name, "", str(page))
        if any(t.fresh_seeds for t in load_suite(name).tasks):
            fill_block(texts[results], f"{name}-fresh", "", str(results))
    if "goals" in names:
        fill_block(texts[readme], README_BLOCK, "", str(readme))
    for name in names:
        suite = load_suite(name)
        folder = store_folder(root, name)
        refs = read_references(folder)
        records = read_records(folder)
        shown = shown_rows(suite, records, refs)
        if suite.choice is None:  # a settings search has no figure: its page is the grids and the choices
            rows_of[name] = shown[1]
        tables = render_tables(suite, [], refs, shown=shown)
        for file, text in tables.items():
            if not file.endswith(".md"):
                out[root / "docs" / "tables" / file] = text
        page = root / page_of[name]
        texts[page] = fill_block(texts[page], name, tables[f"{name}.md"], str(page))
        fresh = shown_rows(suite, records, refs, fresh=True) if any(t.fresh_seeds for t in suite.tasks) else None
        if fresh is not None:
            fresh_tables = render_tables(suite, [], refs, shown=fresh)
            for file, text in fresh_tables.items():
                if not file.endswith(".md"):
                    out[root / "docs" / "tables" / file.replace(name, f"{name}_fresh", 1)] = text
            texts[results] = fill_block(texts[results], f"{name}-fresh", fresh_tables[f"{name}.md"], str(results))
        if name == "goals":
            texts[readme] = fill_block(texts[readme], README_BLOCK,
                                       readme_block(suite, shown[1], fresh[1] if fresh is not None else ()),
                                       str(readme))
    return {**texts, **out}, rows_of


def stale_pages(root: Path, pages: Mapping[str, str]) -> list[str]:
    """The pages under ``root`` (paths relative to it, as ``pages`` names them) whose text is not ``pages``'s: a
    figure edited by hand, or records changed without the pages rendered again."""
    return [rel for rel, text in pages.items()
            if not (root / rel).is_file() or (root / rel).read_text(encoding="utf-8") != text]


def render_pages(root: Path, figures: bool = True) -> list[Path]:
    """Rewrite every generated page under ``root`` from the committed records; returns the files written."""
    from .score_figure import normalised_figure

    pages, rows_of = generated_pages(Path(root))
    written = []
    for path, text in pages.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            written.append(path)
    if figures:
        for name, rows in rows_of.items():
            written.append(normalised_figure(rows, Path(root) / "docs" / "img" / f"{name}_normalised.png"))
    return written
