"""``--mode direct``: the model picks actions, answers cached per state, invalid answers fall back and are counted.

Runs use ``replay:`` files (keyed by iteration, candidate and state, as a direct run's transcript is), a scripted
client registered in the backend registry for the test, and the loopback OpenAI fake (``tests/fakes``).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fakes import openai_server
from fakes.openai_server import FakeOpenAIServer
from run_helpers import cfg as run_cfg
from run_helpers import quiet

from llm_policy_gen.backends import BACKENDS
from llm_policy_gen.cli import main
from llm_policy_gen.clients.base import ClientOptions, Completion, Request
from llm_policy_gen.envs import get_spec
from llm_policy_gen.errors import BackendError, ProposalError
from llm_policy_gen.formats.action import parse_action
from llm_policy_gen.keeper import seed_ranges
from llm_policy_gen.modes.direct import observation_text
from llm_policy_gen.run import train
from llm_policy_gen.storage.runlog import read_jsonl

fake_openai = openai_server.fake_openai
N_STATES = 324


cfg = partial(run_cfg, env_id="CartPole-v1", mode="direct", iterations=2, candidates=1)


def write_replay(path: Path, answer: Callable[[int, int, int], str], iterations: Sequence[int] = (1, 2),
                 candidates: int = 1, states: Sequence[int] = range(N_STATES)) -> str:
    """A replay file answering every (iteration, candidate, state) with ``answer(iteration, candidate, state)``."""
    path.write_text("".join(
        json.dumps({"iteration": it, "candidate": c, "state": s, "response_text": answer(it, c, s)}) + "\n"
        for it in iterations for c in range(1, candidates + 1) for s in states))
    return f"replay:{path}"


CYCLE = ["Action: 1", "Action: 0", "no idea", "Action: 5"]


def by_state(_it: int, _c: int, s: int) -> str:
    return CYCLE[s % 4]


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
    if error is None:
        assert parse_action(text, 2) == action
        return
    with pytest.raises(ProposalError) as info:
        parse_action(text, 2)
    assert error in info.value.errors[0] and info.value.raw_text == text


def test_observation_text_names_dimensions_with_units() -> None:
    text = observation_text(get_spec("CartPole-v1"), [0.01, -0.5, 0.05, 1.25], 0)
    assert "cart position = 0.01 m" in text and "pole angular velocity = 1.25 rad/s" in text
    lake = observation_text(get_spec("FrozenLake-v1"), 6, 6)
    assert "observation = 6 (row 1, col 2)" in lake


def test_replay_run_caches_per_state_and_counts_invalid_answers(tmp_path: Path) -> None:
    replay = write_replay(tmp_path / "answers.jsonl", by_state)
    res = train(cfg(tmp_path / "logs", backend=replay), log=quiet)
    rd, s = res.run_dir, res.summary
    for name in ("config.json", "events.jsonl", "transcripts.jsonl", "summary.json", "best_policy.json"):
        assert (rd / name).is_file(), name
    calls = read_jsonl(rd / "transcripts.jsonl")
    states = [c["state"] for c in calls]
    assert len(states) == len(set(states)) == s["llm_calls"] == s["states_asked"] <= N_STATES  # one call per state
    assert s["mode"] == "direct" and s["stop_reason"] == "iterations done"
    n_invalid = sum(by_state(0, 1, st) in ("no idea", "Action: 5") for st in states)
    assert s["invalid_answers"] == n_invalid and n_invalid > 0
    assert [c["valid"] for c in calls] == [by_state(0, 1, st) not in ("no idea", "Action: 5") for st in states]
    table = json.loads((rd / "best_policy.json").read_text())["table"]
    for c in calls:
        assert c["response_text"] == by_state(0, 1, c["state"]) and c["format"] == "action"
        assert table[c["state"]] == (int(c["response_text"][-1]) if c["valid"] else 0)  # fallback: default_action
        assert c["messages"][1]["content"].count(f"s{c['state']}") >= 2
    assert {c["phase"] for c in calls} <= {"train", "heldout"}
    events = read_jsonl(rd / "events.jsonl")
    assert [e["iteration"] for e in events] == [1, 2]
    assert sum(e["invalid_answers"] for e in events) <= s["invalid_answers"]  # the held-out episodes may add some
    assert events[-1]["episodes_total"] == s["episodes_total"] == 8
    assert events[-1]["states_cached"] <= s["states_asked"]
    config = json.loads((rd / "config.json").read_text())
    assert config["mode"] == "direct" and config["fallback_action"] == 0 and config["output_format"] == "action"


def test_k_samples_per_state_take_the_majority(tmp_path: Path) -> None:
    def vote(_it: int, c: int, s: int) -> str:
        if s % 2:  # 1, 0, 1 -> 1
            return ["Action: 1", "Action: 0", "Action: 1"][c - 1]
        return ["Action: 1", "Action: 0", "no"][c - 1]  # a tie: the lowest action

    res = train(cfg(tmp_path / "logs", backend=write_replay(tmp_path / "k.jsonl", vote, candidates=3),
                    candidates=3, iterations=1, heldout_episodes=3), log=quiet)
    calls = read_jsonl(res.run_dir / "transcripts.jsonl")
    asked = sorted({c["state"] for c in calls})
    assert len(calls) == 3 * len(asked) and res.summary["states_asked"] == len(asked)
    assert sorted(c["candidate"] for c in calls) == sorted([1, 2, 3] * len(asked))
    table = json.loads((res.run_dir / "best_policy.json").read_text())["table"]
    assert all(table[s] == s % 2 for s in asked)
    assert res.summary["invalid_answers"] == 0


def test_best_policy_replays_the_heldout_score(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    replay = write_replay(tmp_path / "a.jsonl", lambda _i, _c, s: ["Action: 1", "Action: 0", "Action: 0"][s % 3])
    res = train(cfg(tmp_path / "logs", backend=replay), log=quiet)
    heldout = seed_ranges(0)["heldout"]
    assert main(["evaluate", str(res.run_dir), "--episodes", "10", "--seed", str(heldout), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["mean"] == pytest.approx(res.summary["best_eval_mean"])


def test_replaying_a_direct_run_reproduces_it(tmp_path: Path) -> None:
    replay = write_replay(tmp_path / "a.jsonl", lambda _i, _c, s: ["Action: 1", "Action: 0", "Action: 1", "bad"][s % 4])
    first = train(cfg(tmp_path / "one", backend=replay), log=quiet)
    again = train(cfg(tmp_path / "two", backend=f"replay:{first.run_dir / 'transcripts.jsonl'}"), log=quiet)
    for key in ("best_eval_mean", "states_asked", "invalid_answers", "env_steps_total", "llm_calls"):
        assert again.summary[key] == first.summary[key], key


def test_replay_running_out_ends_the_run_cleanly(tmp_path: Path) -> None:
    first = train(cfg(tmp_path / "one", backend=write_replay(tmp_path / "all.jsonl", by_state), iterations=1,
                      heldout_episodes=3), log=quiet)
    asked = [c["state"] for c in read_jsonl(first.run_dir / "transcripts.jsonl")]
    short = write_replay(tmp_path / "short.jsonl", by_state, iterations=(1,), states=asked[:3])
    res = train(cfg(tmp_path / "logs", backend=short, iterations=5), log=quiet)
    s = res.summary
    assert s["llm_calls"] == 3 and s["iterations"] == 1 and "has no answer for iteration 1" in s["stop_reason"]
    assert s["unasked_steps"] > 0 and s["invalid_answers"] == sum(by_state(0, 1, x) in CYCLE[2:] for x in asked[:3])
    assert s["best_eval_episodes"] == 10


# ----------------------------------------------------------------------------------------- a scripted client
class ScriptedClient:
    """A plain-text client: answers by a rule read from the prompt, fails on chosen calls (1-based)."""

    provider = "scripted"
    model = "rule"
    is_llm = False

    def __init__(self, fail_calls: Sequence[int] = ()) -> None:
        self.requests: list[Request] = []
        self.fail_calls = set(fail_calls)
        self._lock = threading.Lock()

    def describe(self) -> dict[str, Any]:
        return {"provider": "scripted", "model": "rule", "is_llm": False}

    def complete(self, request: Request) -> Completion:
        with self._lock:
            self.requests.append(request)
            n = len(self.requests)
        if n in self.fail_calls:
            raise BackendError("scripted outage after 3 attempts")
        return Completion(text=f"Action: {pole_rule(request.messages[-1].content)}", input_tokens=7, output_tokens=3)


CLIENT: list[ScriptedClient] = []


def scripted_client(model: str, options: ClientOptions) -> ScriptedClient:
    """The registered entry point: the client the test put in ``CLIENT``."""
    return CLIENT[0]


@pytest.fixture
def scripted() -> Iterator[Callable[..., ScriptedClient]]:
    def make(**kw: Any) -> ScriptedClient:
        CLIENT[:] = [ScriptedClient(**kw)]
        return CLIENT[0]

    BACKENDS.register("scripted", f"{__name__}:scripted_client", kind="client", default_model="rule", is_llm=False,
                      description="test client")
    yield make
    BACKENDS.unregister("scripted")
    CLIENT.clear()


def pole_rule(prompt: str) -> int:
    """Push toward the side the pole falls to (angle plus a bit of angular velocity), read from the prompt."""
    angle = float(re.search(r"pole angle = (\S+) rad", prompt).group(1))  # type: ignore[union-attr]
    speed = float(re.search(r"pole angular velocity = (\S+) rad/s", prompt).group(1))  # type: ignore[union-attr]
    return int(angle + 0.1 * speed > 0)


def test_scripted_client_plain_text_calls_and_failed_calls_fall_back(tmp_path: Path, scripted: Any) -> None:
    client = scripted(fail_calls=[2])
    res = train(cfg(tmp_path, backend="scripted"), log=quiet)
    s = res.summary
    assert all(r.output.json_schema is None for r in client.requests)  # plain text, no schema
    assert len(client.requests) == s["llm_calls"] + 1 == s["states_asked"]  # the failed call is asked, not paid
    assert s["invalid_answers"] == 1 and s["failed_calls"] == 1 and s["input_tokens"] == 7 * s["llm_calls"]
    failed = [c for c in read_jsonl(res.run_dir / "transcripts.jsonl") if not c["valid"]]
    assert len(failed) == 1 and "scripted outage" in failed[0]["errors"][0] and failed[0]["failed"] is True
    table = json.loads((res.run_dir / "best_policy.json").read_text())["table"]
    assert table[failed[0]["state"]] == 0  # the fallback action
    assert s["best_eval_mean"] > 30  # the rule balances the pole far longer than a fixed action
    assert [r.key.state for r in client.requests] == [c["state"] for c in read_jsonl(res.run_dir /
                                                                                       "transcripts.jsonl")]


def test_table_writing_backends_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["train", "--mode", "direct", "--backend", "offline", "--logs-dir", str(tmp_path),
                 "--iterations", "1"])
    assert code == 2
    assert "--mode direct needs a backend that answers free text" in capsys.readouterr().err
    assert not any(tmp_path.rglob("config.json"))  # a refused run leaves no directory


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
    table = np.asarray(json.loads((res.run_dir / "best_policy.json").read_text())["table"])
    assert (table == 0).all()  # every state took the fallback
