"""``--rules-refine N`` (issue 20 item 4b): a model writes rules, the population search tunes their numbers for N
iterations without calling it, then the model is asked again. Driven by a scripted OpenAI server and by replays of
its transcript; resumed after kill -9 in the middle of a refinement."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fakes import openai_server
from fakes.openai_server import FakeOpenAIServer, ok
from run_helpers import comparable, kill_and_resume

from llm_policy_gen.cli import main
from llm_policy_gen.clients.transcript import read_transcript
from llm_policy_gen.formats.ruleset import RuleSet
from llm_policy_gen.storage.runlog import read_jsonl

fake_openai = openai_server.fake_openai  # the fixture, found by pytest under this name

#: A CartPole rules answer: push right where the pole leans right (bins 4-5 of its angle), else a linear score.
RULES = {"rationale": "push toward the fall", "cases": [{"conditions": [{"dim": 2, "min_bin": 4, "max_bin": 5}],
                                                         "action": 1}],
         "linear": [{"output": 0, "weights": [0.1, 0.2, 1.0, 0.5], "bias": 0.0, "thresholds": [0.0]}],
         "otherwise": 0}
#: Rules without a number to tune.
FLAT = {"rationale": "always right", "cases": [], "linear": [], "otherwise": 1}
ITERATIONS = 7


def train(tmp_path: Path, run_id: str, *args: str) -> Path:
    code = main(["train", "--env", "CartPole-v1", "--iterations", str(ITERATIONS), "--candidates", "2",
                 "--output-format", "rules", "--logs-dir", str(tmp_path), "--run-id", run_id, "--no-plots",
                 "--no-progress", "--quiet", "--no-cache", "--heldout-episodes", "10", *args])
    assert code == 0
    return tmp_path / "CartPole-v1" / run_id


def phases(run: Path) -> dict[int, set[tuple[str, str]]]:
    out: dict[int, set[tuple[str, str]]] = {}
    for r in read_transcript(run / "transcripts.jsonl"):
        out.setdefault(int(r["iteration"]), set()).add((str(r["phase"]), str(r["backend"])))
    return out


def replay_file(path: Path, answer: dict[str, Any]) -> str:
    path.write_text("".join(json.dumps({"iteration": it, "candidate": c, "response_text": json.dumps(answer)}) + "\n"
                            for it in range(1, ITERATIONS + 1) for c in (1, 2)))
    return f"replay:{path}"


def test_the_model_is_asked_every_third_iteration_and_refinements_tune_only_numbers(
        tmp_path: Path, fake_openai: FakeOpenAIServer) -> None:
    for _ in range(6):  # iterations 1, 4 and 7, two candidates each
        fake_openai.push(ok(json.dumps(RULES)))
    run = train(tmp_path, "live", "--backend", "openai:gpt-4.1-mini", "--rules-refine", "2")
    assert len(fake_openai.requests) == 6
    model, refine = {("propose", "openai")}, {("refine", "refine")}
    assert phases(run) == {1: model, 2: refine, 3: refine, 4: model, 5: refine, 6: refine, 7: model}
    for r in read_transcript(run / "transcripts.jsonl"):
        if r["phase"] != "refine":
            continue
        assert r["valid"] and r["model"].endswith("(not an LLM)") and r["input_tokens"] == 0
        rules = RuleSet.from_dict(json.loads(r["response_text"]))
        # the model's structure stays: the case's action, its open upper bound, the linear rule's threshold
        (case,) = rules.cases
        assert case["action"] == 1 and case["conditions"][0]["dim"] == 2 and case["conditions"][0]["max_bin"] == 5
        (rule,) = rules.linear
        assert rule["thresholds"] == [0.0] and rules.otherwise == 0
    tuned = {json.dumps(json.loads(r["response_text"])["linear"]) for r in read_transcript(run / "transcripts.jsonl")}
    assert len(tuned) > 4  # the numbers did move
    settings = json.loads((run / "config.json").read_text())["config"]
    assert settings["rules_refine"] == 2
    # a replay of the transcript with the same settings reproduces the run: the refinements are recomputed
    again = train(tmp_path, "replayed", "--backend", f"replay:{run / 'transcripts.jsonl'}", "--rules-refine", "2")
    assert comparable(again)[1:] == comparable(run)[1:]
    assert [e["eval_mean"] for e in read_jsonl(again / "events.jsonl")] == \
        [e["eval_mean"] for e in read_jsonl(run / "events.jsonl")]
    # and the option comes back from the run's config.json
    reused = train(tmp_path, "reused", "--config", str(again / "config.json"))
    assert json.loads((reused / "config.json").read_text())["config"]["rules_refine"] == 2
    assert phases(reused) == phases(again)


def test_rules_without_numbers_leave_nothing_to_refine(tmp_path: Path) -> None:
    run = train(tmp_path, "flat", "--backend", replay_file(tmp_path / "flat.jsonl", FLAT), "--rules-refine", "2")
    assert all(p == {("propose", "replay")} for p in phases(run).values())


def test_without_refine_every_iteration_asks_the_model(tmp_path: Path) -> None:
    run = train(tmp_path, "plain", "--backend", replay_file(tmp_path / "plain.jsonl", RULES))
    assert all(p == {("propose", "replay")} for p in phases(run).values())


def test_killed_in_a_refinement_and_resumed_it_ends_as_an_uninterrupted_run(tmp_path: Path) -> None:
    backend = replay_file(tmp_path / "answers.jsonl", RULES)
    cut, ref = kill_and_resume(tmp_path, ["--backend", backend, "--output-format", "rules", "--rules-refine", "2",
                                          "--candidates", "2", "--heldout-episodes", "10", "--no-cache"],
                               "CartPole-v1", ITERATIONS, after=2)
    assert cut == ref
    events = [read_jsonl(tmp_path / "CartPole-v1" / r / "events.jsonl") for r in ("cut", "ref")]
    drop = {"wall_s"}
    assert [{k: v for k, v in e.items() if k not in drop} for e in events[0]] == \
        [{k: v for k, v in e.items() if k not in drop} for e in events[1]]
    assert phases(tmp_path / "CartPole-v1" / "cut") == phases(tmp_path / "CartPole-v1" / "ref")


@pytest.mark.parametrize(("args", "expected"), [
    (["--backend", "offline", "--output-format", "rules"], "--rules-refine 2 needs an LLM backend (or replay:PATH)"),
    (["--backend", "REPLAY", "--output-format", "table"], "--rules-refine 2 needs --output-format rules"),
    (["--backend", "REPLAY", "--output-format", "rules", "--mode", "direct"],
     "--rules-refine 2 does not apply to --mode direct"),
])
def test_a_combination_it_cannot_serve_is_one_line_and_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], expected: str) -> None:
    backend = replay_file(tmp_path / "answers.jsonl", RULES)
    logs = tmp_path / "logs"
    argv = [backend if a == "REPLAY" else a for a in args]
    assert main(["train", "--env", "CartPole-v1", "--rules-refine", "2", "--logs-dir", str(logs), *argv]) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error" in line]
    assert len(errors) == 1 and expected in errors[0] and "Traceback" not in err, err
    assert not logs.exists() or not any(logs.rglob("*.json*"))  # no run left behind


def test_refinement_tunes_the_product_weights_of_the_kept_rules() -> None:
    """Product weights are numbers to tune; their dimensions are the model's structure and stay."""
    import numpy as np

    from llm_policy_gen.envs import get_spec
    from llm_policy_gen.formats import make_format
    from llm_policy_gen.formats.base import Target
    from llm_policy_gen.prompting.builder import HistoryEntry, PromptContext
    from llm_policy_gen.prompting.memory import ExperienceMemory
    from llm_policy_gen.proposers.refine import KeptRulesSearch

    spec = get_spec("CartPole-v1")
    obs, acts = spec.observation_discretizer(), spec.action_discretizer()
    kept = {**RULES, "linear": [{**RULES["linear"][0], "products": [{"dims": [2, 3], "weight": 0.8},
                                                                    {"dims": [0, 0], "weight": -0.5}]}]}

    def ctx(iteration: int, history: list[HistoryEntry]) -> PromptContext:
        mem = ExperienceMemory(obs.n_states, acts.n_actions)
        source = make_format("rules").parse(json.dumps(kept), _fctx(spec)).source
        return PromptContext(spec=spec, observation=obs, actions=acts, iteration=iteration,
                             current_table=spec.default_table(), best_test_mean=None, test_episodes=3, memory=mem,
                             evidence=mem.evidence(), fmt=make_format("rules"),
                             target=Target("action", n_actions=acts.n_actions), history=history, candidates=3,
                             current_source=source)

    search = KeptRulesSearch(seed=2)
    first = [r.linear[0] for r, _ in search.propose(ctx(1, []), 3)]
    assert search.size == 4 + 1 + 2 + 1  # weights, bias, two product weights, the case's inner lower bound
    assert first[0]["products"] == [{"dims": [2, 3], "weight": 0.8}, {"dims": [0, 0], "weight": -0.5}]
    assert all([p["dims"] for p in r["products"]] == [[2, 3], [0, 0]] for r in first)
    moved = [p["weight"] for p in first[1]["products"]]
    assert moved != [0.8, -0.5] and np.allclose(np.add(moved, [p["weight"] for p in first[2]["products"]]),
                                                [1.6, -1.0])  # a direction and its mirror around the kept weights
    history = [HistoryEntry(1, s, 1, s == 50.0, 0, candidate=c) for c, s in ((1, 5.0), (2, 50.0), (3, 10.0))]
    centre = [r.linear[0] for r, _ in search.propose(ctx(2, history), 3)][0]
    assert [p["weight"] for p in centre["products"]] != [0.8, -0.5]  # the centre moved toward candidate 2


def _fctx(spec: Any) -> Any:
    from llm_policy_gen.formats.base import FormatContext, Target

    obs, acts = spec.observation_discretizer(), spec.action_discretizer()
    return FormatContext(obs, acts, spec.default_table(), Target("action", n_actions=acts.n_actions), spec)


#: Rules that push away from the fall: never better than the initial table (always left), so never adopted.
WRONG = {"rationale": "push away from the fall", "cases": [],
         "linear": [{"output": 0, "weights": [0.0, 0.0, -1.0, -0.5], "bias": 0.0, "thresholds": [0.0]}],
         "otherwise": 0}


def test_a_weak_models_rules_are_refined_even_when_not_adopted(tmp_path: Path) -> None:
    """The kept table is the constant initial one (no number to tune): the refinement starts from the model's rules."""
    run = train(tmp_path, "weak", "--backend", replay_file(tmp_path / "weak.jsonl", WRONG), "--rules-refine", "2")
    events = read_jsonl(run / "events.jsonl")
    assert not events[0]["accepted"]  # the model's rules lost to the initial table
    assert phases(run)[2] == {("refine", "refine")} and phases(run)[4] == {("propose", "replay")}
    first = [r for r in read_transcript(run / "transcripts.jsonl") if r["iteration"] == 2]
    for r in first:  # the model's structure, its numbers moved
        (rule,) = RuleSet.from_dict(json.loads(r["response_text"])).linear
        assert rule["thresholds"] == [0.0] and rule["weights"] != WRONG["linear"][0]["weights"]
    # the search moves on from there (its centre is the model's rules, not the kept constant table)
    tuned = {json.dumps(json.loads(r["response_text"])["linear"]) for r in read_transcript(run / "transcripts.jsonl")
             if r["phase"] == "refine"}
    assert len(tuned) >= 6
