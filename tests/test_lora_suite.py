"""The `lora` suite (issue 62 item 6): its definition, its committed records (ten seeds of `train` itself on a GPU,
training and held-out seeds from `--seed`, a fixed step budget, the final policy reported) and the statistics of
bench/lm_lora_records.py, which count a seed that never solved as never."""

from __future__ import annotations

import importlib
import math
from pathlib import Path
from types import ModuleType

import pytest

from llm_policy_gen.keeper import SeedPlan
from llm_policy_gen.suites.definition import load_suite, suite_names
from llm_policy_gen.suites.store import cell_key, read_records

ROOT = Path(__file__).resolve().parents[1]
STORE = ROOT / "llm_policy_gen" / "suites" / "data" / "lora"


@pytest.fixture
def stats(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    return importlib.import_module("lm_lora_records")


def test_the_suite_names_its_task_method_and_seeds() -> None:
    assert "lora" in suite_names()
    suite = load_suite("lora")
    (task,), (method,) = suite.tasks, suite.methods
    assert (task.env_id, task.seeds, task.settings) == ("FrozenLake-v1.deterministic", tuple(range(10)),
                                                        {"max_steps": 10240})
    assert method.iterations * 128 == 10240 and "lm_lora=8" in method.entry and "select=none" in method.entry


def test_the_committed_records_are_ten_seeds_of_the_product_under_the_protocol() -> None:
    suite = load_suite("lora")
    records = read_records(STORE)
    assert sorted(r.seed for r in records) == list(range(10))
    for r in records:
        assert r.cell == cell_key(r.env_id, r.entry, r.seed, r.budget, r.settings)
        words = r.command.split()
        assert words[words.index("--seed") + 1] == str(r.seed)
        assert {"--select", "none", "--lora", "8", "--max-steps", "10240"} <= set(words)
        assert r.result["learner_steps"] == 10240 and r.result["stop_reason"] != "interrupted"
        assert r.result["model"] == "SmolLM2-135M-Instruct Q4_1 (135M parameters, 4-bit)"
        assert r.result["device"].startswith("NVIDIA") and r.result["torch_version"].startswith("2.11")
        assert r.result["lm_model_sha256"].startswith("b179c952")
        assert r.result["heldout_mean"] == r.result["final_heldout_mean"]  # --select none reports the final policy
        measured = [p for p in r.curve if p[2] is not None]
        assert len(measured) == 20  # the held-out cadence, never counted, never used to stop
        assert r.suite == suite.name and r.env_id == suite.tasks[0].env_id
    # held-out seeds come from each run's own seed plan, so no two seeds share them
    assert len({SeedPlan(r.seed).heldout(0) for r in records}) == 10


def test_a_seed_that_never_solved_counts_as_never(stats: ModuleType) -> None:
    assert stats.median_never([100, None, None]) == math.inf
    assert stats.median_never([100, 300, None]) == 300
    assert stats.iqm([0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]) == pytest.approx(5 / 6)
    records = read_records(STORE)
    firsts = [r.result["first_solve_steps"] for r in records]
    assert sum(f is not None for f in firsts) == 9
    assert stats.median_never(firsts) == 6144
    assert stats.iqm([r.result["final_heldout_mean"] for r in records]) == pytest.approx(5 / 6)
