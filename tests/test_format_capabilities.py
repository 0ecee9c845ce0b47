"""Formats are plug-ins that declare capabilities: no module outside ``formats/`` compares a format's name, and a
format none of them names (``decisions``, a decision list) trains with ``offline`` and through a fake OpenAI server,
with a repaired answer and a resume."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import numpy as np
import pytest
from fakes import openai_server
from fakes.openai_server import ok

from llm_policy_gen.cli import main
from llm_policy_gen.clients.transcript import read_transcript
from llm_policy_gen.formats import FORMATS
from llm_policy_gen.policy import TablePolicy
from llm_policy_gen.storage.runlog import read_jsonl

fake_openai = openai_server.fake_openai
PACKAGE = Path(__file__).resolve().parents[1] / "llm_policy_gen"
FORMATS_DIR = PACKAGE / "formats"


def _modules_outside_formats() -> list[Path]:
    return [p for p in sorted(PACKAGE.rglob("*.py")) if FORMATS_DIR not in p.parents]


def _strings(node: ast.expr) -> list[str]:
    """The string literals ``node`` is (a constant, or a tuple, list or set of them)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for elt in node.elts for s in _strings(elt)]
    return []


def test_no_module_outside_formats_compares_a_format_name_to_a_literal() -> None:
    names = set(FORMATS.names())
    found = []
    for path in _modules_outside_formats():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            for side in sides:
                named = names.intersection(_strings(side))
                others = " ".join(ast.unparse(s) for s in sides if s is not side)
                if named and ("fmt" in others or "format" in others):
                    found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {ast.unparse(node)}")
    assert not found, "ask the format's capabilities instead:\n" + "\n".join(found)


def test_the_decision_list_is_named_only_by_its_file_and_its_registry_line() -> None:
    assert "decisions" in FORMATS
    named = [f"{p.relative_to(PACKAGE)}:{n.lineno}" for p in sorted(PACKAGE.rglob("*.py"))
             if p not in (FORMATS_DIR / "decisions.py", FORMATS_DIR / "__init__.py")
             for n in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
             if isinstance(n, ast.Constant) and n.value == "decisions"]
    assert not named


def _train(tmp_path: Path, *args: str) -> Path:
    logs = tmp_path / "logs"
    code = main(["train", "--env", "CartPole-v1", "--output-format", "decisions", "--seed", "0", "--logs-dir",
                 str(logs), "--no-plots", "--no-progress", *args])
    assert code == 0
    (run,) = sorted((logs / "CartPole-v1").iterdir())
    return run


def test_a_decision_list_run_with_offline(tmp_path: Path) -> None:
    run = _train(tmp_path, "--backend", "offline", "--iterations", "3", "--candidates", "2")
    lines = read_transcript(run / "transcripts.jsonl")  # offline's lines are packed: the package's reader
    assert len(lines) == 6 and all(t["valid"] for t in lines)
    answers = [json.loads(t["response_text"]) for t in lines]
    assert all(set(a) == {"rationale", "decisions", "default"} for a in answers)
    # The prompt shows the current list, never the table (the format's shows_table and current_text): offline's
    # replay asks the prompts a model would get.
    lines = read_jsonl(_train(tmp_path / "again", "--backend", f"replay:{run}", "--iterations", "3", "--candidates",
                              "2") / "transcripts.jsonl")
    first, later = lines[0]["messages"][-1]["content"], lines[-1]["messages"][-1]["content"]
    assert "The current table, written as a decision list (it was not compiled from one):" in first
    assert "The current decision list (the table is compiled from it):" in later
    assert all("One line per bin tuple" not in t["messages"][-1]["content"] for t in lines)
    assert '"decisions": [{"when": [{"dim": <int>' in first
    best = TablePolicy.load(run / "best_policy.json")
    assert best.source is not None and best.source["format"] == "decisions"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["best_iteration"] >= 1 and summary["best_eval_mean"] > 100


def _answer(decisions: list[dict[str, object]], default: int) -> str:
    return json.dumps({"rationale": "push toward the fall", "decisions": decisions, "default": default})


def _when(dim: int, lo: int, hi: int) -> dict[str, int]:
    return {"dim": dim, "min_bin": lo, "max_bin": hi}


def test_a_decision_list_through_a_fake_server_is_repaired_and_resumes(fake_openai, tmp_path: Path) -> None:
    bad = _answer([{"when": [_when(3, 4, 2)], "then": 1}], 2)  # min_bin > max_bin, an action out of range
    good = _answer([{"when": [_when(3, 3, 5)], "then": 1}, {"when": [_when(2, 3, 5)], "then": 1}], 0)
    later = _answer([{"when": [_when(3, 3, 5)], "then": 1}], 0)
    fake_openai.push(ok(bad), ok(good), ok(later))
    run = _train(tmp_path, "--backend", "openai:gpt-4.1-mini", "--iterations", "1", "--candidates", "1",
                 "--train-episodes", "2")
    assert main(["train", "--resume", str(run), "--iterations", "2", "--no-progress", "--no-plots"]) == 0
    lines = read_jsonl(run / "transcripts.jsonl")
    assert [(t["iteration"], t["attempt"], t["valid"]) for t in lines] == [(1, 1, False), (1, 2, True), (2, 1, True)]
    assert lines[0]["errors"] == ["decisions[0].when[0]: min_bin 4 > max_bin 2", "default: action 2 out of range 0..1"]
    assert "min_bin 4 > max_bin 2" in lines[1]["messages"][-1]["content"]  # the repair message went back
    # The schema sent carries the format's bounds.
    schema = fake_openai.bodies[0]["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["default"]["enum"] == [0, 1] and schema["properties"]["decisions"]["maxItems"] == 324
    # Iteration 1's policy is the table the repaired list compiles to: first match wins, default elsewhere.
    policy = TablePolicy.load(run / "policies" / "iter_0001.json")
    bins = np.stack(np.unravel_index(np.arange(324), (3, 3, 6, 6)), axis=1)
    expected = np.where((bins[:, 3] >= 3) | (bins[:, 2] >= 3), 1, 0)
    assert np.array_equal(policy.table, expected)
    assert policy.source == {"format": "decisions", "default": 0, "decisions": [
        {"when": [_when(3, 3, 5)], "then": 1}, {"when": [_when(2, 3, 5)], "then": 1}]}
    assert len(fake_openai.bodies) == 3  # the resumed run sent only iteration 2's call


def test_proposers_read_the_iteration_state_not_the_prompts_fields() -> None:
    """``PromptContext`` is the iteration's state plus what only templates render; proposers are typed on the
    state (mypy then refuses a proposer that reads a template field)."""
    importing = [p.name for p in sorted((PACKAGE / "proposers").glob("*.py"))
                 for n in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
                 if isinstance(n, ast.ImportFrom) and any(a.name == "PromptContext" for a in n.names)]
    assert not importing
    from llm_policy_gen.prompting.builder import IterationState, PromptContext

    rendered_only = {f for f in PromptContext.__dataclass_fields__} - set(IterationState.__dataclass_fields__)
    assert {"best_test_mean", "test_episodes", "memory", "templates", "sections"} <= rendered_only


class _Bare:
    """A format written before capabilities: the protocol's methods, not its class."""

    name = "bare"


def test_a_format_class_that_does_not_subclass_the_protocol_is_named_at_once() -> None:
    from llm_policy_gen.formats import make_format

    FORMATS.register("bare", f"{__name__}:_Bare", description="test only")
    try:
        with pytest.raises(TypeError, match="'bare': _Bare must subclass formats.base.AnswerFormat"):
            make_format("bare")
    finally:
        FORMATS.unregister("bare")
