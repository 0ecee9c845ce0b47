"""A first run that shows learning (issue 59, item 14).

``make run`` printed held-out 498.8 from iteration 1 to 30: ``offline``'s first candidate is the spec's prior rule,
which does the work. Now the console's first line about the table says where the kept table starts (and its
held-out mean), ``make run`` starts it at the default action with no prior rule (``--prior neutral``), and a run
that calls no model writes its transcript packed (2.6 MB of a 30-iteration CartPole run were the prompts and answers
of proposals no model was sent; 0.18 MB now: ``tests/test_transcript_size.py``), while the package's reader gives
every prompt and answer back and the transcript still replays to the same policies.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from llm_policy_gen.cli import main
from llm_policy_gen.clients.transcript import read_transcript
from llm_policy_gen.collect import Collector
from llm_policy_gen.envs import get_spec
from llm_policy_gen.keeper import SeedPlan
from llm_policy_gen.storage.runlog import read_jsonl

ROOT = Path(__file__).resolve().parents[1]
HELDOUT = 5


def _train(logs: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[list[str], Path]:
    code = main(["train", "--env", "CartPole-v1", "--backend", "offline", "--candidates", "2", "--heldout-episodes",
                 str(HELDOUT), "--logs-dir", str(logs), "--run-id", "r", "--no-plots", *extra])
    err = capsys.readouterr().err
    assert code == 0, err
    return err.splitlines(), logs / "CartPole-v1" / "r"


def _heldout(table_of: str) -> float:
    spec = get_spec("CartPole-v1")
    table = spec.prior_table() if table_of == "prior" else spec.default_table()
    plan = SeedPlan(0)
    with Collector(spec, workers=1) as collector:
        return collector.evaluate(table, [plan.heldout(j) for j in range(HELDOUT)]).mean


@pytest.mark.parametrize(("prior", "where", "table_of"), [
    ("neutral", "'push cart left' in every state (the spec's default action; --prior neutral: no prior rule)",
     "default"),
    ("spec", "'push cart left' in every state (the spec's default action; --prior start would start at the spec's "
     "prior rule)", "default"),
    ("start", "the spec's prior rule (--prior start)", "prior"),
])
def test_the_first_line_about_the_table_says_where_it_started(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], prior: str, where: str, table_of: str) -> None:
    lines, _ = _train(tmp_path, capsys, "--iterations", "1", "--prior", prior)
    start = [x for x in lines if x.startswith("start: ")]
    assert start == [f"start: the kept table is {where}; held-out {_heldout(table_of):.1f} over {HELDOUT} episodes"]
    assert lines.index(start[0]) < next(i for i, x in enumerate(lines) if x.startswith("iter 1/1:"))


def test_make_run_starts_from_a_blank_table_and_the_held_out_mean_rises(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The Makefile's ``run`` recipe (its ``train`` arguments, ARGS empty), 2 iterations."""
    recipe = re.search(r"^run: .*\n\t\$\(BIN\)/llm-policy-gen (.*)$", (ROOT / "Makefile").read_text(), re.M)
    assert recipe, "no run target"
    args = shlex.split(recipe.group(1).replace("$(ARGS)", ""))
    assert args[:3] == ["train", "--env", "CartPole-v1"] and "--prior" in args
    code = main([*args, "--backend", "offline", "--iterations", "2", "--heldout-episodes", str(HELDOUT),
                 "--logs-dir", str(tmp_path), "--run-id", "r", "--no-plots"])
    err = capsys.readouterr().err
    assert code == 0, err
    (start,) = [x for x in err.splitlines() if x.startswith("start: ")]
    assert "(the spec's default action; --prior neutral: no prior rule)" in start, start
    began = float(re.search(r"held-out (\d+\.\d)", start).group(1))  # type: ignore[union-attr]
    events = read_jsonl(tmp_path / "CartPole-v1" / "r" / "events.jsonl")
    assert events[-1]["best_eval_mean"] > began + 50, (began, [e["best_eval_mean"] for e in events])


def test_a_run_that_calls_no_model_writes_its_prompts_packed_and_replays_the_same(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, run = _train(tmp_path / "a", capsys, "--iterations", "3")
    assert all(c["packed"] == 1 for c in read_jsonl(run / "transcripts.jsonl"))
    calls = read_transcript(run / "transcripts.jsonl")
    assert len(calls) == 6 and all(c["prompt_chars"] == sum(len(m["content"]) for m in c["messages"]) > 1000
                                   for c in calls)
    assert all(c["response_text"] and "not an LLM" in c["model"] for c in calls)
    # what a replay needs is there: the recorded answers give the same policies
    _, again = _train(tmp_path / "b", capsys, "--iterations", "3", "--backend", f"replay:{run}")

    def tables(rd: Path) -> list[list[int]]:
        return [json.loads(p.read_text())["table"] for p in sorted((rd / "policies").glob("iter_*.json"))]

    assert tables(again) == tables(run) and len(tables(run)) == 3
    assert json.loads((again / "best_policy.json").read_text())["table"] == \
        json.loads((run / "best_policy.json").read_text())["table"]
