"""The suite's tables from records (issue 61 item 4, issue 62 item 3's yardsticks), on a tiny synthetic suite:
per-seed values always, an interval only over 5 or more seeds and labelled with n, our goal and gymnasium's
threshold each judged, a score normalised to the threshold (none without one), only current records shown, pooled
figures only over tasks both methods ran, Markdown, CSV and LaTeX written."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from llm_policy_gen.suites.cells import key_of, settings_of
from llm_policy_gen.suites.definition import parse_suite
from llm_policy_gen.suites.references import References
from llm_policy_gen.suites.store import SuiteRecord
from llm_policy_gen.suites.tables import render_tables, write_tables

SUITE = parse_suite({
    "suite": {"name": "tiny", "seeds": "0-5"},
    "method": [{"label": "offline", "entry": "offline"},
               {"label": "ppo-at-offline", "entry": "ppo-at-offline=@peer[peer_algo=ppo]",
                "budget": "steps-of:offline"}],
    "task": [{"key": "cart", "env_id": "CartPole-v1", "budget": 100, "goal": 475.0, "threshold": 475.0, "need": 4},
             {"key": "pend", "env_id": "Pendulum-v1", "budget": 50, "goal": -160.0, "seeds": "0-2", "need": 2}],
}, "tiny")
REFS = References(random_policy={"cart": {s: 20.0 for s in range(6)}, "pend": {s: -1200.0 for s in range(3)}})


def _record(task: str, method: str, seed: int, value: float, budget: dict[str, Any], steps: int = 1000,
            within: float | None = None) -> SuiteRecord:
    t, m = SUITE.task(task), SUITE.method(method)
    return SuiteRecord(suite="tiny", task=task, env_id=t.env_id, method=method, entry=m.entry, seed=seed,
                       cell=key_of(t, m, seed, budget), budget=budget,
                       settings=settings_of(t, m, budget), code="0.1.0+abc1234",
                       result={"heldout_mean": value, "heldout_within": within, "episodes": 100, "env_steps": steps})


def _records() -> list[SuiteRecord]:
    out = [_record("cart", "offline", s, 500.0 - s, {"max_episodes": 100}, steps=1000 + s) for s in range(6)]
    out += [_record("cart", "ppo-at-offline", s, 400.0 + s, {"max_steps": 1000 + s}) for s in range(6)]
    out.append(_record("cart", "ppo-at-offline", 0, 1.0, {"max_steps": 999}))  # another budget: history
    out += [_record("pend", "offline", s, -150.0 - s, {"max_episodes": 50}, within=-170.0 + s) for s in range(3)]
    return out


def test_intervals_only_over_five_seeds_per_seed_values_always_and_both_yardsticks() -> None:
    md = render_tables(SUITE, _records(), REFS)["tiny.md"]
    cart = next(line for line in md.splitlines() if line.startswith("| CartPole-v1 | offline |"))
    assert "[" in cart and "(n=6)" in cart and "**yes** (6/6)" in cart  # goal and threshold both met on 6 seeds
    assert "1.05 [" in cart  # (497.5 - 20) / (475 - 20): normalised to gymnasium's threshold
    pend = next(line for line in md.splitlines() if line.startswith("| Pendulum-v1 | offline |"))
    assert "median -151.0 (n=3, no interval)" in pend and "| none |" in pend  # no threshold: no normalised score
    assert "no (0/3)" in pend  # judged within the budget (-170 to -168), not on the final -150 to -152
    assert "| Pendulum-v1 | offline | 0-2 | -150.0, -151.0, -152.0 | - |" in md
    assert "0.1.0+abc1234" in cart


def test_a_record_at_another_budget_is_history_and_pooled_figures_need_a_common_task_set() -> None:
    files = render_tables(SUITE, _records(), REFS)
    rows = list(csv.DictReader(files["tiny_seeds.csv"].splitlines()))
    ppo = [r for r in rows if r["method"] == "ppo-at-offline"]
    assert len(ppo) == 6 and "1" not in {r["heldout_mean"] for r in ppo}
    summary = {(r["task"], r["method"]): r for r in csv.DictReader(files["tiny.csv"].splitlines())}
    assert summary[("cart", "offline")]["goal_met"] == "True" and summary[("pend", "offline")]["iqm"] == ""
    assert "Pooled" not in files["tiny.md"]  # one task in common: nothing is pooled
    assert "\\begin{tabular}" in files["tiny.tex"] and "$\\geq$ 475.0" in files["tiny.tex"]


def test_write_tables_writes_markdown_csv_and_latex(tmp_path: Path) -> None:
    written = write_tables(SUITE, _records(), tmp_path / "out", references=REFS)
    assert sorted(p.name for p in written) == ["tiny.csv", "tiny.md", "tiny.tex", "tiny_seeds.csv"]
    assert all(p.is_file() and p.stat().st_size > 0 for p in written)
