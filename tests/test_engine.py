"""The run engine through its public interface: contract files, K candidates, replay, resume, stops."""

import json
import signal
from functools import partial
from pathlib import Path

import numpy as np
import pytest
from run_helpers import cfg as run_cfg
from run_helpers import kill_and_resume, quiet

from llm_policy_gen.clients.transcript import read_transcript
from llm_policy_gen.errors import UserError
from llm_policy_gen.run import resume, train
from llm_policy_gen.storage.runlog import read_jsonl

EVENT_KEYS = {"iteration", "train_return", "eval_mean", "eval_returns", "best_eval_mean", "accepted",
              "episodes_total", "env_steps_total", "input_tokens", "output_tokens", "cost_usd",
              "validation_errors", "wall_s", "candidate_means", "chosen", "best_test_mean"}
TRANSCRIPT_KEYS = {"iteration", "backend", "model", "messages", "response_text", "valid", "errors",
                   "input_tokens", "output_tokens", "latency_s", "candidate", "attempt"}
SUMMARY_KEYS = {"best_eval_mean", "solved", "episodes_to_solve", "iterations", "episodes_total", "env_steps_total",
                "input_tokens", "output_tokens", "cost_usd", "wall_s", "mode", "stop_reason"}
ROOT = Path(__file__).resolve().parents[1]


cfg = partial(run_cfg, env_id="CartPole-v1", heldout_episodes=20, plots=True, cache=True)


def tables(run_dir: Path) -> dict[str, list[int]]:
    return {p.name: json.loads(p.read_text())["table"] for p in sorted((run_dir / "policies").glob("*.json"))}


def test_run_directory_has_every_contract_file(tmp_path):
    res = train(cfg(tmp_path), log=quiet)
    rd = res.run_dir
    assert rd.parent.name == "CartPole-v1" and rd.parent.parent == tmp_path
    for name in ("config.json", "events.jsonl", "transcripts.jsonl", "best_policy.json", "summary.json",
                 "training.png", "testing.png", "checkpoint.npz"):
        assert (rd / name).is_file(), name
    assert sorted(p.name for p in (rd / "policies").iterdir()) == [f"iter_{i:04d}.json" for i in (1, 2, 3)]
    events = read_jsonl(rd / "events.jsonl")
    assert [e["iteration"] for e in events] == [1, 2, 3]
    assert all(EVENT_KEYS <= set(e) for e in events)
    assert all(len(e["candidate_means"]) == 4 for e in events)  # K = 4 by default
    transcripts = read_jsonl(rd / "transcripts.jsonl")
    assert all(TRANSCRIPT_KEYS <= set(t) for t in transcripts)
    assert {(t["iteration"], t["candidate"]) for t in transcripts} == {(i, c) for i in (1, 2, 3) for c in (1, 2, 3, 4)}
    summary = json.loads((rd / "summary.json").read_text())
    assert SUMMARY_KEYS <= set(summary)
    config = json.loads((rd / "config.json").read_text())
    assert config["seed"] == 0 and config["backend"]["is_llm"] is False and "version" in config
    assert config["env_spec"]["dims"][2]["bins"] == 6 and config["config"]["candidates"] == 4
    # counts add up: the events' running totals end at the summary's
    assert events[-1]["episodes_total"] == summary["episodes_total"]
    assert events[0]["accepted"] is True  # a rule near the prior beats the blank table
    # the adoption carries the new best's held-out measurement; best_eval_mean is the held-out mean everywhere
    assert {"heldout_mean", "heldout_std", "heldout_episodes"} <= set(events[0])
    assert events[-1]["best_eval_mean"] == summary["best_eval_mean"]
    assert not list(rd.rglob("*.tmp"))


def test_same_seed_same_run(tmp_path):
    a = train(cfg(tmp_path / "a"), log=quiet).summary
    b = train(cfg(tmp_path / "b"), log=quiet).summary
    for key in ("best_eval_mean", "episodes_total", "env_steps_total", "best_iteration"):
        assert a[key] == b[key]


@pytest.mark.parametrize("k", [1, 2, 4])
def test_any_run_replays_to_the_same_policies(tmp_path, k):
    first = train(cfg(tmp_path / "a", iterations=4, candidates=k), log=quiet)
    again = train(cfg(tmp_path / "b", iterations=4, candidates=k,
                      backend=f"replay:{first.run_dir / 'transcripts.jsonl'}"), log=quiet)
    assert tables(first.run_dir) == tables(again.run_dir)
    assert first.summary["best_eval_mean"] == again.summary["best_eval_mean"]
    assert first.summary["episodes_total"] == again.summary["episodes_total"]


def _answer(rule: str, rationale: str = "r") -> str:
    rows = [{"state": s, "action": int(eval(rule))} for s in range(324)]  # noqa: S307 - test data
    return json.dumps({"rationale": rationale, "rows": rows})


def test_failed_call_repairs_and_two_candidates_replay_exactly(tmp_path):
    """A transcript with a failed call, a refused answer and its repair, K = 2: replay is keyed, not ordered."""
    lines = [
        {"iteration": 1, "candidate": 1, "attempt": 1, "response_text": "", "failed": True,
         "error": "openai:m at http://x failed after 5 attempts: InternalServerError"},
        {"iteration": 1, "candidate": 2, "attempt": 1, "response_text": '{"rationale": "x", "rows": [{"state": 999, '
         '"action": 1}]}'},
        {"iteration": 1, "candidate": 2, "attempt": 2, "response_text": _answer("s % 6 >= 3")},
        {"iteration": 2, "candidate": 1, "attempt": 1, "response_text": _answer("s % 2")},
        {"iteration": 2, "candidate": 2, "attempt": 1, "response_text": _answer("s % 3 == 0")},
    ]
    path = tmp_path / "recorded.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in reversed(lines)))  # order must not matter
    a = train(cfg(tmp_path / "a", iterations=5, candidates=2, backend=f"replay:{path}"), log=quiet)
    tr = read_jsonl(a.run_dir / "transcripts.jsonl")
    by_key = {(t["iteration"], t["candidate"], t["attempt"]): t for t in tr}
    assert by_key[(1, 1, 1)]["failed"] is True and "InternalServerError" in by_key[(1, 1, 1)]["error"]
    assert (1, 1, 2) not in by_key  # a failed call is not repaired
    assert by_key[(1, 2, 1)]["valid"] is False and by_key[(1, 2, 2)]["valid"] is True
    assert "state 999 out of range" in by_key[(1, 2, 2)]["messages"][-1]["content"]
    ev = read_jsonl(a.run_dir / "events.jsonl")
    assert [e["iteration"] for e in ev] == [1, 2] and ev[0]["candidate_means"][0] is None
    assert "no answer for iteration 3" in a.summary["stop_reason"]
    # the run's own transcript replays to identical policy files, failure and repair included
    b = train(cfg(tmp_path / "b", iterations=5, candidates=2, backend=f"replay:{a.run_dir / 'transcripts.jsonl'}"),
              log=quiet)
    assert tables(a.run_dir) == tables(b.run_dir) and len(tables(a.run_dir)) == 2
    assert json.loads((a.run_dir / "best_policy.json").read_text())["table"] == \
        json.loads((b.run_dir / "best_policy.json").read_text())["table"]
    tb = read_jsonl(b.run_dir / "transcripts.jsonl")
    assert {(t["iteration"], t["candidate"], t["attempt"], bool(t.get("failed"))) for t in tb} == \
        {(t["iteration"], t["candidate"], t["attempt"], bool(t.get("failed"))) for t in tr}


def test_replay_refuses_another_environment_and_an_empty_file(tmp_path):
    first = train(cfg(tmp_path / "a", iterations=1, candidates=1), log=quiet)
    with pytest.raises(UserError, match="env_id 'CartPole-v1'"):
        train(cfg(tmp_path / "b", env_id="FrozenLake-v1", backend=f"replay:{first.run_dir}"), log=quiet)
    with pytest.raises(UserError, match="n_states 324"):
        train(cfg(tmp_path / "c", bins=[3, 3, 6, 5], backend=f"replay:{first.run_dir}"), log=quiet)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(UserError, match="is empty"):
        train(cfg(tmp_path / "d", backend=f"replay:{empty}"), log=quiet)
    assert not (tmp_path / "b").exists() or not any((tmp_path / "b").rglob("events.jsonl"))


BAD_ANSWERS = {
    "prose": "I would push the cart toward the side the pole leans.",
    "truncated": '{"rationale": "x", "rows": [{"state": 0, "action": 1}, {"state": 1,',
    "state range": '{"rationale": "x", "rows": [{"state": 324, "action": 1}]}',
    "action range": '{"rationale": "x", "rows": [{"state": 3, "action": 7}]}',
    "types": '{"rationale": "x", "rows": [{"state": "three", "action": 1.5}]}',
    "empty": "",
}


def test_bad_responses_never_crash_never_become_best(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps({"response_text": t}) + "\n" for t in BAD_ANSWERS.values()))
    res = train(cfg(tmp_path, iterations=10, candidates=1, repair_attempts=0, backend=f"replay:{path}"), log=quiet)
    events = read_jsonl(res.run_dir / "events.jsonl")
    assert len(events) == len(BAD_ANSWERS)
    assert all(not e["accepted"] and e["validation_errors"] and e["eval_mean"] is None for e in events)
    best = json.loads((res.run_dir / "best_policy.json").read_text())
    assert best["table"] == [0] * 324  # still the initial table
    assert res.summary["invalid_iterations"] == len(BAD_ANSWERS) and res.summary["never_accepted"] is True
    assert "no answer for iteration 7" in res.summary["stop_reason"]
    errors = [e["validation_errors"][0] for e in events]
    assert "no JSON object found" in errors[0] and "truncated JSON" in errors[1]
    assert "state 324 out of range" in errors[2] and "action 7 out of range" in errors[3]
    assert "valid integer" in errors[4] and "empty answer" in errors[5]


def test_prompt_stays_under_12000_characters(tmp_path):
    res = train(cfg(tmp_path, iterations=6), log=quiet)
    sizes = [e["prompt_chars"] for e in read_jsonl(res.run_dir / "events.jsonl")]
    assert max(sizes) < 12000 and res.summary["prompt_chars_max"] == max(sizes)


def test_frozen_lake_offline_reaches_success_rate_one_within_10_iterations(tmp_path):
    res = train(cfg(tmp_path, env_id="FrozenLake-v1.deterministic", iterations=10, heldout_episodes=100), log=quiet)
    assert res.summary["best_eval_mean"] == 1.0 and res.summary["iteration_solved"] <= 10


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_cartpole_offline_solves(tmp_path, seed):
    res = train(cfg(tmp_path, iterations=30, seed=seed, heldout_episodes=100, plots=False), log=quiet)
    s = res.summary
    assert s["best_eval_mean"] >= 475 and s["solved"] and s["iteration_solved"] <= 30


def test_patience_stops_early(tmp_path):
    res = train(cfg(tmp_path, env_id="FrozenLake-v1.deterministic", iterations=30, patience=2), log=quiet)
    assert res.summary["iterations"] < 30 and "no new best" in res.summary["stop_reason"]


def test_max_episodes_ends_the_run(tmp_path):
    res = train(cfg(tmp_path, iterations=30, max_episodes=60), log=quiet)
    s = res.summary
    assert s["iterations"] < 30 and "episode budget" in s["stop_reason"]
    events = read_jsonl(res.run_dir / "events.jsonl")
    assert events[-2]["episodes_total"] < 60 <= s["episodes_total"]


def test_written_numbers_are_finite(tmp_path):
    res = train(cfg(tmp_path), log=quiet)
    for e in read_jsonl(res.run_dir / "events.jsonl"):
        assert np.isfinite(e["best_eval_mean"]) and np.isfinite(e["best_test_mean"])


def test_k_candidates_are_distinct_and_scored_on_the_same_seeds(tmp_path):
    res = train(cfg(tmp_path, env_id="FrozenLake-v1", iterations=2, candidates=3), log=quiet)
    tr = read_transcript(res.run_dir / "transcripts.jsonl")  # an offline run's lines are packed: read them whole
    texts = [t["response_text"] for t in tr if t["iteration"] == 2]
    assert len(texts) == 3 and len(set(texts)) == 3
    ev = read_jsonl(res.run_dir / "events.jsonl")
    assert all(len(e["candidate_means"]) == 3 for e in ev)


# ---------------------------------------------------------------------------------------------------- resume
@pytest.mark.slow
@pytest.mark.parametrize("env_id, after, sig", [("CartPole-v1", 2, signal.SIGKILL), ("CartPole-v1", 5, signal.SIGINT),
                                                ("FrozenLake-v1", 3, signal.SIGKILL)])
def test_killed_run_resumes_to_the_uninterrupted_result(tmp_path, env_id, after, sig):
    resumed, uninterrupted = kill_and_resume(tmp_path, ["--backend", "offline"], env_id, 8, after, sig)
    assert resumed == uninterrupted


def test_interrupted_summary_agrees_with_its_files(tmp_path, monkeypatch):
    """Ctrl-C in the middle of an iteration: the summary describes the last finished one (issue 9, item 8)."""
    from llm_policy_gen.keeper import Keeper

    real = Keeper.judge
    calls = {"n": 0}

    def judge(self, *a, **kw):
        calls["n"] += 1
        verdict = real(self, *a, **kw)
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return verdict

    monkeypatch.setattr(Keeper, "judge", judge)
    with pytest.raises(KeyboardInterrupt):
        train(cfg(tmp_path, iterations=6, run_id="cut"), log=quiet)
    rd = tmp_path / "CartPole-v1" / "cut"
    s = json.loads((rd / "summary.json").read_text())
    best = json.loads((rd / "best_policy.json").read_text())
    assert s["stop_reason"] == "interrupted" and s["iterations"] == 2
    assert s["best_iteration"] <= s["iterations"] and best["meta"]["iteration"] == s["best_iteration"]
    assert len(read_jsonl(rd / "events.jsonl")) == 2
    monkeypatch.setattr(Keeper, "judge", real)
    res = resume(rd, log=quiet)
    assert res.summary["iterations"] == 6 and res.summary["stop_reason"] == "iterations done"


def test_resume_refuses_other_settings_and_finished_runs(tmp_path):
    res = train(cfg(tmp_path, iterations=2), log=quiet)
    with pytest.raises(UserError, match="cannot change"):
        resume(res.run_dir, {"seed": 3}, log=quiet)
    with pytest.raises(UserError, match="already finished"):
        resume(res.run_dir, log=quiet)
    longer = resume(res.run_dir, {"iterations": 4}, log=quiet)
    assert longer.summary["iterations"] == 4
    with pytest.raises(UserError, match="does not exist"):
        resume(tmp_path / "nope", log=quiet)
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(UserError, match="is a file, not a folder"):
        resume(tmp_path / "a_file", log=quiet)
    assert (tmp_path / "a_file").read_text() == "x"
