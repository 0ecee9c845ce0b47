"""Issue 61 item 5: a user's own model on a suite. ``bench SUITE --methods mine=openai:MODEL`` against a loopback
OpenAI-compatible server on a two-task, two-seed suite: the projected calls, tokens and cost are printed before the
first call, ``--budget-usd`` is honoured over the whole suite, and the tables hold its rows beside the baselines'
committed rows (a committed store written by the test, beside the suite's TOML file).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes import openai_server
from fakes.openai_server import FakeOpenAIServer
from fakes.tables import TableResponder
from run_helpers import answer
from test_bench_command import METHODS, bench, task, write_suite

from llm_policy_gen.suites import runner
from llm_policy_gen.suites.cells import select
from llm_policy_gen.suites.definition import load_suite
from llm_policy_gen.suites.store import SuiteRecord, append_records, read_records

MODEL = "gpt-4.1-mini"
SETTINGS = "heldout_episodes = 5, candidates = 2, cache = false, confirm_episodes = 0"
TASKS = task("cartpole", "CartPole-v1", 475.0, settings=SETTINGS) + \
    task("lake", "FrozenLake-v1.deterministic", 1.0, settings=SETTINGS)


class TwoTasks:
    """Answers a CartPole prompt with CartPole's tables and a FrozenLake prompt with a lake's table."""

    def __init__(self) -> None:
        self.cartpole = TableResponder()

    def __call__(self, body: dict[str, Any]) -> str:
        if "FrozenLake" in json.dumps(body):
            return answer([2, 2, 1, 0, 1, 0, 1, 0, 2, 1, 1, 0, 0, 2, 2, 0], "action")
        return self.cartpole(body)


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(api_key=openai_server.FAKE_KEY, responder=TwoTasks()) as s:
        monkeypatch.setenv("OPENAI_BASE_URL", s.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", openai_server.FAKE_KEY)
        yield s


def committed_baselines(suite_path: Path) -> list[SuiteRecord]:
    """The baselines' committed rows, as a project would have committed them: one record per cell of offline and
    q-learning, keyed as bench keys them, with figures of their own."""
    suite = load_suite(str(suite_path))
    config = runner.BenchConfig(suite=suite, source=str(suite_path), out=suite_path.parent / "unused",
                                selection=select(suite, methods="offline,q-learning"))
    cells = runner.make_plan(config).cells
    records = [SuiteRecord(suite=suite.name, task=c.task.key, env_id=c.task.env_id, method=c.method.label,
                           entry=c.method.entry, seed=c.seed, cell=c.key, budget=c.budget, settings=c.settings,
                           result={"heldout_mean": 100.0 + i, "episodes": 20, "env_steps": 900},
                           code="0.0.0+fixture", made="2026-12-01T00:00:00+00:00", source="run")
               for i, c in enumerate(cells)]
    append_records(runner.committed_store(str(suite_path), suite), records)
    return records


@pytest.mark.slow
def test_a_users_model_runs_the_suite_with_its_cost_said_first_and_its_row_beside_the_baselines(
        server: FakeOpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    prices = tmp_path / "prices.toml"
    prices.write_text(f'[openai]\n"{MODEL}" = {{ input = 100.0, output = 100.0 }}\n', encoding="utf-8")
    monkeypatch.setenv("LLM_POLICY_GEN_PRICES", str(prices))
    suite = write_suite(tmp_path, methods=METHODS, tasks=TASKS)
    baselines = committed_baselines(suite)
    out = tmp_path / "out"

    said: dict[str, Any] = {}
    real_run_plan = runner.run_plan

    def run_plan(plan: runner.Plan, say: Any = None) -> Any:  # what was said and called when the runs begin
        said["err"], said["requests"] = capsys.readouterr().err, len(server.requests)
        return real_run_plan(plan, say)

    monkeypatch.setattr(runner, "run_plan", run_plan)
    ceiling = 1.5
    assert bench(suite, out, "--methods", f"mine=openai:{MODEL}", "--budget-usd", str(ceiling)) == 0, \
        capsys.readouterr().err
    assert said["requests"] == 0  # the projection came before the first call
    head = said["err"]
    assert "suite tiny: 4 cells: 0 recorded, 0 finished on disk (adopted, not run), 0 resumable" in head, head
    line = next(x for x in head.splitlines() if x.startswith("projected model use: "))
    assert " calls, " in line and " tokens in, " in line and "$" in line, line
    assert f"is over --budget-usd {ceiling:g}" in head or f"--budget-usd {ceiling:g}: $" in head, head

    mine = read_records(out)
    assert {(r.task, r.seed) for r in mine} == {(t, s) for t in ("cartpole", "lake") for s in (0, 1)}
    assert all(r.method == "mine" and r.result["model"] == MODEL for r in mine)
    assert sum(r.result["calls"] for r in mine) == len(server.requests) > 0  # the calls went to the loopback server
    spent = sum(r.result["cost_usd"] for r in mine)
    assert 0 < spent <= ceiling  # the suite-wide ceiling
    assert any(r.result["stop_reason"] == "budget reached" for r in mine)

    with open(out / "tiny_seeds.csv", newline="", encoding="utf-8") as fh:  # one row per record shown
        rows = list(csv.DictReader(fh))
    assert {(r["method"], r["code"]) for r in rows if r["method"] != "mine"} == \
        {(b.method, "0.0.0+fixture") for b in baselines}
    assert len([r for r in rows if r["method"] == "mine"]) == 4 and len(rows) == len(baselines) + 4
    with open(out / "tiny.csv", newline="", encoding="utf-8") as fh:  # one row per task and method
        summary = list(csv.DictReader(fh))
    assert {(r["task"], r["method"]) for r in summary} >= {("cartpole", "mine"), ("lake", "mine")}
    for name in ("tiny.md", "tiny.tex"):  # the same table in Markdown and LaTeX, the model's row beside the others
        text = (out / name).read_text(encoding="utf-8")
        assert "mine" in text and all(b.method in text for b in baselines), name
