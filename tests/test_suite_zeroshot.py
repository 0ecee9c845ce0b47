"""The zero-shot measurement as a suite (``llm_policy_gen/suites/data/zeroshot.toml``; it replaced
``bench/lm_zero_shot.py``): each method is a product run of 0 iterations, the language model's read-out before any
update under each length normalisation (``--lm-head scores``), the spec's prior table and the constant table, all
measured on the run seed's held-out seeds.

The runs here use a tiny Llama written as SmolLM2's file in a models folder of the test's own (``models:smollm2``
then names it), so that the suite's own entries run without the real model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_lm_identity import tiny_gguf
from test_lm_policy import needs_extra

from llm_policy_gen.cli import main
from llm_policy_gen.collect import Collector
from llm_policy_gen.envs import get_spec
from llm_policy_gen.lm.model_files import MODEL_FILES
from llm_policy_gen.policy import TablePolicy
from llm_policy_gen.run.files import RunDir
from llm_policy_gen.suites.definition import load_suite
from llm_policy_gen.suites.store import read_records
from llm_policy_gen.sweep.methods import parse_method
from llm_policy_gen.sweep.random_baseline import heldout_seeds

# the language-model tests share one xdist worker (why: test_lm_policy.py)
pytestmark = pytest.mark.xdist_group("smollm2-torch")


def test_the_suite_measures_every_table_with_zero_iterations_on_ten_seeds() -> None:
    suite = load_suite("zeroshot")
    assert [(t.key, t.env_id) for t in suite.tasks] == [("frozenlake", "FrozenLake-v1.deterministic"),
                                                        ("cartpole", "CartPole-v1")]
    assert all(t.seeds == tuple(range(10)) and t.settings == {"iterations": 0, "heldout_episodes": 100}
               for t in suite.tasks)
    assert all(m.budget == "own" and not m.iterations for m in suite.methods)  # the task's 0 iterations
    options = {m.label: parse_method(m.entry).options for m in suite.methods}
    for model, name in (("models:smollm2", "smollm2"), ("models:qwen2.5-coder-0.5b", "qwen")):
        assert {options[f"{name}-{norm}"]["lm_score_norm"] for norm in ("word", "token", "sum")} == \
            {"word", "token", "sum"}
        assert all(options[f"{name}-{norm}"] == {"lm_model": model, "lm_head": "scores", "lm_score_norm": norm,
                                                 "lm_features": "onehot", "select": "none"}
                   for norm in ("word", "token", "sum"))
    assert options["prior"] == {"prior": "start"} and options["constant"] == {"prior": "neutral"}


def unpublished(tmp_path: Path) -> str:
    """A copy of the shipped suite whose committed store (beside the copy) is empty, whatever the project published."""
    folder = tmp_path / "suite"
    folder.mkdir(exist_ok=True)
    shipped = Path(__file__).resolve().parents[1] / "llm_policy_gen" / "suites" / "data" / "zeroshot.toml"
    (folder / "zeroshot.toml").write_text(shipped.read_text(encoding="utf-8"), encoding="utf-8")
    return str(folder / "zeroshot.toml")


def test_a_model_that_is_not_fetched_is_listed_with_the_command_that_fetches_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("LLM_POLICY_GEN_MODELS", str(tmp_path / "models"))
    assert main(["bench", unpublished(tmp_path), "--tasks", "frozenlake", "--seeds", "0", "--list",
                 "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "8 cells:" in out and "2 to run" in out and "6 not run" in out
    assert "frozenlake/qwen-sum seed 0: not run: --lm-model models:qwen2.5-coder-0.5b: the model is not fetched" in out
    assert "fetch it with: python tools/fetch_model.py smollm2" in out
    assert not (tmp_path / "out").exists()


@needs_extra
@pytest.mark.slow
def test_the_zero_shot_tables_are_the_models_best_scored_actions_measured_on_the_run_seeds_heldout_seeds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each zero-shot run reports the table the model's scores give before any update (config.json's
    ``zero_shot_table``, recomputed here from the model under the method's normalisation), measured on the run
    seed's 100 held-out seeds, with no episode counted; the prior and constant runs report the spec's tables on the
    same seeds."""
    from llm_policy_gen.lm.backbone import load_language_model
    from llm_policy_gen.lm.scores import ActionScorer, continuations, normalise, scoring_prompts, word_counts

    models = tmp_path / "models"
    models.mkdir()
    model = tiny_gguf(models / MODEL_FILES["smollm2"])
    monkeypatch.setenv("LLM_POLICY_GEN_MODELS", str(models))
    out, seed = tmp_path / "out", 1
    assert main(["bench", unpublished(tmp_path), "--tasks", "frozenlake,cartpole", "--seeds", str(seed), "--methods",
                 "smollm2-word,smollm2-sum,prior,constant", "--out", str(out), "--no-progress"]) == 0
    records = {(r.task, r.method): r for r in read_records(out)}
    assert len(records) == 8 and all(r.result["iterations"] == 0 for r in records.values())
    lm = load_language_model(model, tmp_path / "lm-cache")
    scorer = ActionScorer(lm, None)
    for task in load_suite("zeroshot").tasks:
        spec = get_spec(task.env_id)
        obs, acts = spec.observation_discretizer(), spec.action_discretizer()
        sums, tokens = scorer.raw(scoring_prompts(spec, obs, acts), continuations(acts))
        prior = spec.prior_table()
        expected = {"prior": spec.default_table() if prior is None else prior, "constant": spec.default_table()}
        for norm in ("word", "sum"):
            expected[f"smollm2-{norm}"] = np.argmax(normalise(sums, tokens, word_counts(acts), norm), axis=1)
            run = RunDir(out / task.key / "runs" / spec.env_id / f"smollm2-{norm}_s{seed}").read()
            assert run.record["zero_shot_table"] == expected[f"smollm2-{norm}"].tolist()
            assert records[(task.key, f"smollm2-{norm}")].result["episodes"] == 0  # nothing played or counted
        with Collector(spec, workers=1) as c:
            for label, table in expected.items():  # the run reports that table, measured on the seed's held-out seeds
                reported = RunDir(out / task.key / "runs" / spec.env_id / f"{label}_s{seed}").best_policy
                assert TablePolicy.load(reported).table.tolist() == list(table), (task.key, label)
                mean = float(c.evaluate(np.asarray(table, dtype=np.int64), heldout_seeds(seed, 100)).mean)
                assert records[(task.key, label)].heldout == pytest.approx(mean), (task.key, label)
