"""Reward and advisor runs through each real SDK client against its loopback server: the request carries the mode's
prompt and the schema of its target (a value or an action per state), answers are parsed, and replaying the
transcript gives the same policies."""

from __future__ import annotations

import itertools
import json
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fakes import anthropic_server, openai_server
from fakes.gemini_server import fake_gemini_fixture  # noqa: F401
from run_helpers import answer, comparable, goal_distances, path_advice

from llm_policy_gen.cli import main
from llm_policy_gen.storage.runlog import read_jsonl

fake_openai = openai_server.fake_openai
fake_anthropic = anthropic_server.fake_anthropic

PROVIDERS = {"openai": ("gpt-4.1-mini", "fake_openai"), "anthropic": ("claude-haiku-4-5", "fake_anthropic"),
             "gemini": ("gemini-2.5-flash", "fake_gemini")}
MODES = {"reward": ("value", "You design reward shaping"), "advisor": ("action", "You advise a reinforcement")}


class Answers:
    """Valid FrozenLake 4x4 answers for the mode, a different one for each call."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.calls = itertools.count()
        self.lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> str:
        with self.lock:
            k = next(self.calls)
        if self.mode == "reward":
            return answer(-goal_distances("4x4") * (1.0 + 0.25 * k), "value", rationale=f"closer is better ({k})")
        advice = path_advice("4x4")
        advice[k % 16] = (advice[k % 16] + 1) % 4
        return answer(advice, "action", rationale=f"follow the path ({k})")


def schema_and_system(provider: str, body: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The structured-output schema and the system prompt of a request, from the provider's own fields."""
    if provider == "anthropic":
        return body["output_config"]["format"]["schema"], str(body["system"])
    if provider == "gemini":
        system = "".join(p["text"] for p in body["systemInstruction"]["parts"])
        return body["generationConfig"]["responseJsonSchema"], system
    system = "".join(m["content"] for m in body["messages"] if m["role"] == "system")
    return body["response_format"]["json_schema"]["schema"], system


def row_fields(schema: dict[str, Any]) -> set[str]:
    items = schema["properties"]["rows"]["items"]
    if "$ref" in items:
        items = schema["$defs"][items["$ref"].rsplit("/", 1)[-1]]
    return set(items["properties"])


def run(tmp_path: Path, name: str, backend: str, mode: str) -> Path:
    logs = tmp_path / name
    code = main(["train", "--env", "FrozenLake-v1", "--mode", mode, "--backend", backend, "--iterations", "2",
                 "--candidates", "2", "--heldout-episodes", "5", "--output-format", "table", "--logs-dir", str(logs),
                 "--no-plots", "--no-progress", "--no-cache"])
    assert code == 0
    (run_dir,) = (logs / "FrozenLake-v1").iterdir()
    return run_dir


def same_run(a: Any, b: Any) -> bool:
    backend_fields = ("backend", "model", "is_llm", "input_tokens", "output_tokens", "cached_input_tokens",
                      "cost_usd", "cost_complete", "llm_calls", "cached_calls")
    strip = lambda s: {k: v for k, v in s.items() if k not in backend_fields}  # noqa: E731
    return bool(strip(a[0]) == strip(b[0]) and a[1:] == b[1:])


@pytest.mark.parametrize("provider", list(PROVIDERS))
@pytest.mark.parametrize("mode", list(MODES))
def test_a_mode_through_a_real_client_sends_its_schema_and_replays_exactly(
        provider: str, mode: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    model, fixture = PROVIDERS[provider]
    server = request.getfixturevalue(fixture)
    server.responder = Answers(mode)
    recorded = run(tmp_path, "llm", f"{provider}:{model}", mode)

    field, system_words = MODES[mode]
    bodies = server.bodies
    assert len(bodies) == 4  # 2 iterations x 2 candidates, every answer valid: no repair
    for body in bodies:
        schema, system = schema_and_system(provider, body)
        assert row_fields(schema) == {"state", field} and system_words in system
    calls = read_jsonl(recorded / "transcripts.jsonl")
    assert len(calls) == 4 and all(c["valid"] and c["mode"] == mode and c["backend"] == provider for c in calls)
    assert "How the learner did under earlier" in calls[-1]["messages"][1]["content"]
    summary = json.loads((recorded / "summary.json").read_text())
    assert summary["mode"] == mode and summary["is_llm"] and summary["llm_calls"] == 4
    events = read_jsonl(recorded / "events.jsonl")
    assert all(len(e["learner_train_returns"]) == 2 and e["mode"] == mode for e in events)

    replayed = run(tmp_path, "replay", f"replay:{recorded / 'transcripts.jsonl'}", mode)
    assert len(server.bodies) == 4  # nothing was sent again
    assert same_run(comparable(replayed), comparable(recorded))
    # the answers reached the learner: its training episodes replay too
    assert [e["learner_train_returns"] for e in read_jsonl(replayed / "events.jsonl")] == \
        [e["learner_train_returns"] for e in events]
    assert np.isfinite(summary["best_eval_mean"])
