"""``--mode direct``: the model picks actions, answers cached per state, invalid answers fall back and are counted.

Runs use ``replay:`` files, a scripted in-test backend, and the loopback OpenAI fake (``tests/fakes``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from fakes import openai_server
from fakes.openai_server import FakeOpenAIServer

from llm_policy_gen.backends.base import Completion, Message, OutputFormat
from llm_policy_gen.cli import main
from llm_policy_gen.config import TrainConfig
from llm_policy_gen.direct import observation_text, parse_action
from llm_policy_gen.envs import get_spec
from llm_policy_gen.errors import BackendError
from llm_policy_gen.keeper import seed_ranges
from llm_policy_gen.loop import train
from llm_policy_gen.runlog import read_jsonl

fake_openai = openai_server.fake_openai


def quiet(_msg: str) -> None:
    pass


def cfg(tmp_path: Path, **kw: Any) -> TrainConfig:
    base: dict[str, Any] = dict(env_id="CartPole-v1", mode="direct", iterations=2, logs_dir=str(tmp_path),
                                progress=False, plots=False, heldout_episodes=10, cache=False)
    base.update(kw)
    return TrainConfig(**base)


def write_replay(path: Path, answers: Sequence[str]) -> Path:
    path.write_text("".join(json.dumps({"response_text": a}) + "\n" for a in answers))
    return path


@pytest.mark.parametrize(("text", "action", "error"), [
    ("Action: 1", 1, None),
    ("action:0", 0, None),
    ("**Action:** 1", 1, None),
    ("Action = 1", 1, None),
    ("Action: 0 would let it fall, so Action: 1", 1, None),
    ("I would push right", None, "no 'Action: N' line"),
    ("Action: 2", None, "out of range 0..1"),
    ("Action: -1", None, "out of range"),
    ("", None, "no 'Action: N' line"),
])
def test_parse_action(text: str, action: int | None, error: str | None) -> None:
    got, errors = parse_action(text, 2)
    assert got == action
    assert (errors == []) if error is None else (error in errors[0])


def test_observation_text_names_dimensions_with_units() -> None:
    text = observation_text(get_spec("CartPole-v1"), [0.01, -0.5, 0.05, 1.25], 0)
    assert "cart position = 0.01 m" in text and "pole angular velocity = 1.25 rad/s" in text
    lake = observation_text(get_spec("FrozenLake-v1"), 6, 6)
    assert "observation = 6 (row 1, col 2)" in lake


def test_replay_run_caches_per_state_and_counts_invalid_answers(tmp_path: Path) -> None:
    answers = ["Action: 1", "Action: 0", "no idea", "Action: 5"] * 100
    replay = write_replay(tmp_path / "answers.jsonl", answers)
    res = train(cfg(tmp_path / "logs", backend=f"replay:{replay}"), log=quiet)
    rd, s = res.run_dir, res.summary
    for name in ("config.json", "events.jsonl", "transcripts.jsonl", "summary.json", "best_policy.json"):
        assert (rd / name).is_file(), name
    calls = read_jsonl(rd / "transcripts.jsonl")
    states = [c["state"] for c in calls]
    assert len(states) == len(set(states)) == s["llm_calls"] == s["states_asked"] <= 324  # one call per state
    assert s["mode"] == "direct" and s["stop_reason"] == "iterations done"
    used = answers[: len(calls)]
    n_invalid = sum(a in ("no idea", "Action: 5") for a in used)
    assert s["invalid_answers"] == n_invalid and n_invalid > 0
    assert [c["valid"] for c in calls] == [a not in ("no idea", "Action: 5") for a in used]
    table = json.loads((rd / "best_policy.json").read_text())["table"]
    for c, a in zip(calls, used, strict=True):
        assert c["action"] == table[c["state"]] == (int(a[-1]) if c["valid"] else 0)  # fallback: default_action
        assert c["messages"][1]["content"].count(f"s{c['state']}") >= 2
    events = read_jsonl(rd / "events.jsonl")
    assert [e["iteration"] for e in events] == [1, 2]
    assert sum(e["invalid_answers"] for e in events) <= s["invalid_answers"]  # the held-out episodes may add some
    assert events[-1]["episodes_total"] == s["episodes_total"] == 8
    assert events[-1]["states_cached"] <= s["states_asked"]
    config = json.loads((rd / "config.json").read_text())
    assert config["mode"] == "direct" and config["fallback_action"] == 0


def test_best_policy_replays_the_heldout_score(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    replay = write_replay(tmp_path / "a.jsonl", ["Action: 1", "Action: 0", "Action: 0"] * 200)
    res = train(cfg(tmp_path / "logs", backend=f"replay:{replay}"), log=quiet)
    heldout = seed_ranges(0)["heldout"]
    assert main(["evaluate", str(res.run_dir), "--episodes", "10", "--seed", str(heldout), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["mean"] == pytest.approx(res.summary["best_eval_mean"])


def test_replaying_a_direct_run_reproduces_it(tmp_path: Path) -> None:
    replay = write_replay(tmp_path / "a.jsonl", ["Action: 1", "Action: 0", "Action: 1", "bad"] * 200)
    first = train(cfg(tmp_path / "one", backend=f"replay:{replay}"), log=quiet)
    again = train(cfg(tmp_path / "two", backend=f"replay:{first.run_dir / 'transcripts.jsonl'}"), log=quiet)
    for key in ("best_eval_mean", "states_asked", "invalid_answers", "env_steps_total"):
        assert again.summary[key] == first.summary[key], key


def test_replay_running_out_ends_the_run_cleanly(tmp_path: Path) -> None:
    replay = write_replay(tmp_path / "short.jsonl", ["Action: 1", "Action: 0", "Action: 1"])
    res = train(cfg(tmp_path / "logs", backend=f"replay:{replay}", iterations=5), log=quiet)
    s = res.summary
    assert s["llm_calls"] == 3 and s["iterations"] == 1 and "no more answers" in s["stop_reason"]
    assert s["unasked_steps"] > 0 and s["invalid_answers"] == 0
    assert s["best_eval_episodes"] == 10


class Scripted:
    """A plain-text backend: answers by a rule, fails on chosen calls."""

    name = "scripted"
    model = "rule"
    is_llm = False

    def __init__(self, fail_calls: Sequence[int] = ()) -> None:
        self.calls: list[Sequence[Message]] = []
        self.formats: list[OutputFormat] = []
        self.fail_calls = set(fail_calls)

    def describe(self) -> dict[str, Any]:
        return {"provider": "scripted"}

    def complete(self, messages: Sequence[Message], output: OutputFormat, context: Any = None) -> Completion:
        self.calls.append(messages)
        self.formats.append(output)
        if len(self.calls) in self.fail_calls:
            raise BackendError("scripted outage after 3 attempts")
        return Completion(text=f"Action: {pole_rule(messages[-1].content)}", input_tokens=7, output_tokens=3)


def pole_rule(prompt: str) -> int:
    """Push toward the side the pole falls to (angle plus a bit of angular velocity), read from the prompt."""
    angle = float(re.search(r"pole angle = (\S+) rad", prompt).group(1))  # type: ignore[union-attr]
    speed = float(re.search(r"pole angular velocity = (\S+) rad/s", prompt).group(1))  # type: ignore[union-attr]
    return int(angle + 0.1 * speed > 0)


def test_scripted_backend_plain_text_calls_and_failed_calls_fall_back(tmp_path: Path) -> None:
    backend = Scripted(fail_calls=[2])
    res = train(cfg(tmp_path), backend=backend, log=quiet)
    s = res.summary
    assert all(f.json_schema is None for f in backend.formats)
    assert len(backend.calls) == s["llm_calls"] + 1 == s["states_asked"]  # the failed call is asked, not paid
    assert s["invalid_answers"] == 1
    failed = [c for c in read_jsonl(res.run_dir / "transcripts.jsonl") if not c["valid"]]
    assert len(failed) == 1 and "scripted outage" in failed[0]["errors"][0] and failed[0]["fallback"] is True
    assert s["best_eval_mean"] > 30  # the rule balances the pole far longer than a fixed action


def test_table_writing_backends_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["train", "--mode", "direct", "--backend", "offline", "--logs-dir", str(tmp_path),
                 "--iterations", "1"])
    assert code == 2
    assert "--mode direct needs a backend that answers free text" in capsys.readouterr().err


def test_against_the_loopback_openai_server(tmp_path: Path, fake_openai: FakeOpenAIServer) -> None:
    fake_openai.responder = lambda body: f"Action: {pole_rule(body['messages'][-1]['content'])}"
    res = train(cfg(tmp_path, backend="openai:gpt-4.1-mini", heldout_episodes=5), log=quiet)
    s = res.summary
    bodies = fake_openai.bodies
    assert len(bodies) == s["llm_calls"] == s["states_asked"] > 0
    assert all("response_format" not in b for b in bodies)  # plain text, not structured output
    assert s["is_llm"] is True and s["input_tokens"] > 0 and s["cost_usd"] > 0 and s["invalid_answers"] == 0
    assert s["best_eval_mean"] > 30


def test_budget_stops_calls_before_they_are_made(tmp_path: Path, fake_openai: FakeOpenAIServer) -> None:
    fake_openai.responder = lambda body: "Action: 1"
    res = train(cfg(tmp_path, backend="openai:gpt-4.1-mini", budget_usd=0.0, iterations=3), log=quiet)
    s = res.summary
    assert fake_openai.bodies == [] and s["llm_calls"] == 0
    assert s["stop_reason"] == "budget reached" and s["iterations"] == 1
