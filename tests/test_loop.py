import json

import numpy as np
import pytest

from llm_policy_gen.config import TrainConfig
from llm_policy_gen.loop import train
from llm_policy_gen.runlog import read_jsonl

EVENT_KEYS = {"iteration", "train_return", "eval_mean", "eval_returns", "best_eval_mean", "accepted",
              "episodes_total", "env_steps_total", "input_tokens", "output_tokens", "cost_usd",
              "validation_errors", "wall_s"}
TRANSCRIPT_KEYS = {"iteration", "backend", "model", "messages", "response_text", "valid", "errors",
                   "input_tokens", "output_tokens", "latency_s"}
SUMMARY_KEYS = {"best_eval_mean", "solved", "episodes_to_solve", "iterations", "episodes_total", "env_steps_total",
                "input_tokens", "output_tokens", "cost_usd", "wall_s"}


def cfg(tmp_path, **kw):
    base = dict(env_id="CartPole-v1", backend="offline", iterations=3, logs_dir=str(tmp_path), progress=False,
                heldout_episodes=20)
    base.update(kw)
    return TrainConfig(**base)


def quiet(_msg: str) -> None:
    pass


def test_run_directory_has_every_contract_file(tmp_path):
    res = train(cfg(tmp_path), log=quiet)
    rd = res.run_dir
    assert rd.parent.name == "CartPole-v1" and rd.parent.parent == tmp_path
    for name in ("config.json", "events.jsonl", "transcripts.jsonl", "best_policy.json", "summary.json",
                 "training.png", "testing.png"):
        assert (rd / name).is_file(), name
    assert sorted(p.name for p in (rd / "policies").iterdir()) == [f"iter_{i:04d}.json" for i in (1, 2, 3)]
    events = read_jsonl(rd / "events.jsonl")
    assert [e["iteration"] for e in events] == [1, 2, 3]
    assert all(EVENT_KEYS <= set(e) for e in events)
    assert all(TRANSCRIPT_KEYS <= set(t) for t in read_jsonl(rd / "transcripts.jsonl"))
    summary = json.loads((rd / "summary.json").read_text())
    assert SUMMARY_KEYS <= set(summary)
    config = json.loads((rd / "config.json").read_text())
    assert config["seed"] == 0 and config["backend"]["is_llm"] is False and "version" in config
    assert config["env_spec"]["dims"][2]["bins"] == 6
    # counts add up: the events' running totals end at the summary's
    assert events[-1]["episodes_total"] == summary["episodes_total"]
    assert events[0]["accepted"] is True  # the prior beats the blank table
    assert not list(rd.rglob("*.tmp"))


def test_same_seed_same_run(tmp_path):
    a = train(cfg(tmp_path / "a"), log=quiet).summary
    b = train(cfg(tmp_path / "b"), log=quiet).summary
    for key in ("best_eval_mean", "episodes_total", "env_steps_total", "best_iteration"):
        assert a[key] == b[key]


def test_transcripts_replay_to_the_same_policies(tmp_path):
    first = train(cfg(tmp_path / "a", iterations=4), log=quiet).run_dir
    again = train(cfg(tmp_path / "b", iterations=4, backend=f"replay:{first / 'transcripts.jsonl'}"),
                  log=quiet).run_dir
    for i in range(1, 5):
        a = json.loads((first / "policies" / f"iter_{i:04d}.json").read_text())["table"]
        b = json.loads((again / "policies" / f"iter_{i:04d}.json").read_text())["table"]
        assert a == b
    assert json.loads((first / "summary.json").read_text())["best_eval_mean"] == json.loads(
        (again / "summary.json").read_text())["best_eval_mean"]


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
    res = train(cfg(tmp_path, iterations=10, repair_attempts=0, backend=f"replay:{path}"), log=quiet)
    events = read_jsonl(res.run_dir / "events.jsonl")
    assert len(events) == len(BAD_ANSWERS)
    assert all(not e["accepted"] and e["validation_errors"] and e["eval_mean"] is None for e in events)
    best = json.loads((res.run_dir / "best_policy.json").read_text())
    assert best["table"] == [0] * 324  # still the initial table
    assert res.summary["invalid_iterations"] == len(BAD_ANSWERS)
    assert "no more answers" in res.summary["stop_reason"]
    errors = [e["validation_errors"][0] for e in events]
    assert "no JSON object found" in errors[0] and "truncated JSON" in errors[1]
    assert "state 324 out of range" in errors[2] and "action 7 out of range" in errors[3]
    assert "valid integer" in errors[4] and "empty answer" in errors[5]


def test_repair_loop_sends_errors_back_and_adopts_the_fix(tmp_path):
    good = json.dumps({"rationale": "fixed", "rows": [{"state": s, "action": int(s % 6 >= 3)} for s in range(324)]})
    path = tmp_path / "repair.jsonl"
    path.write_text(json.dumps({"response_text": BAD_ANSWERS["state range"]}) + "\n"
                    + json.dumps({"response_text": good}) + "\n")
    res = train(cfg(tmp_path, iterations=1, repair_attempts=2, backend=f"replay:{path}"), log=quiet)
    tr = read_jsonl(res.run_dir / "transcripts.jsonl")
    assert [t["valid"] for t in tr] == [False, True]
    assert "state 324 out of range" in tr[1]["messages"][-1]["content"]
    assert tr[1]["messages"][-2]["role"] == "assistant"
    ev = read_jsonl(res.run_dir / "events.jsonl")[0]
    assert ev["eval_mean"] is not None and ev["validation_errors"] == []


def test_prompt_stays_under_12000_characters(tmp_path):
    res = train(cfg(tmp_path, iterations=6), log=quiet)
    sizes = [e["prompt_chars"] for e in read_jsonl(res.run_dir / "events.jsonl")]
    assert max(sizes) < 12000 and res.summary["prompt_chars_max"] == max(sizes)


def test_frozen_lake_offline_reaches_success_rate_one_within_10_iterations(tmp_path):
    res = train(cfg(tmp_path, env_id="FrozenLake-v1", iterations=10, heldout_episodes=100), log=quiet)
    assert res.summary["best_eval_mean"] == 1.0 and res.summary["iteration_solved"] <= 10


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cartpole_offline_solves_within_30_iterations(tmp_path, seed):
    res = train(cfg(tmp_path, iterations=30, seed=seed, heldout_episodes=100, plots=False), log=quiet)
    s = res.summary
    assert s["best_eval_mean"] >= 475 and s["solved"] and s["iteration_solved"] <= 30
    assert s["wall_s"] < 60


def test_patience_stops_early(tmp_path):
    res = train(cfg(tmp_path, env_id="FrozenLake-v1", iterations=30, patience=2), log=quiet)
    assert res.summary["iterations"] < 30 and "no new best" in res.summary["stop_reason"]


def test_written_numbers_are_finite(tmp_path):
    res = train(cfg(tmp_path), log=quiet)
    for e in read_jsonl(res.run_dir / "events.jsonl"):
        assert np.isfinite(e["best_eval_mean"])
