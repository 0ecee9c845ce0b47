"""``--lm-lora R``: peft adapters on SmolLM2's attention, trained by SB3 PPO through the scores head (issue 31 item 1).

The model is loaded once per module through the safetensors cache; a run in this process reuses it. Budgets are
tiny (8-step rollouts, one or two gradient steps): LoRA on a shared 2-core CPU costs seconds per gradient step.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_lm_policy import LM_CACHE, lake, needs_extra

from llm_policy_gen.cli import main

# the language-model tests share one xdist worker (why: test_lm_policy.py)
pytestmark = pytest.mark.xdist_group("smollm2-torch")

SMALL = ("--lm-n-steps", "8", "--lm-batch-size", "8", "--lm-epochs", "2")


@pytest.fixture(scope="module")
def smollm2(gguf: Path) -> Any:
    from llm_policy_gen.lm.backbone import load_language_model

    return load_language_model(gguf, LM_CACHE)


@needs_extra
@pytest.mark.slow
def test_lora_steps_change_the_adapters_and_leave_the_loaded_model_frozen(smollm2: Any, gguf: Path,
                                                                          tmp_path: Path) -> None:
    """One PPO update of 8 steps and 2 epochs (2 gradient steps): the checkpoint's adapters moved from their
    initialisation (``lora_B`` starts at zero), the loaded model's own weights did not, and config.json counts the
    trainable numbers (rank 4 on q and v of 30 layers: 30 * 4 * ((576 + 576) + (576 + 192)))."""
    import numpy as np

    from llm_policy_gen.run.checkpoint import load_checkpoint

    q_before = smollm2.model.layers[0].self_attn.q_proj.weight.detach().clone()
    logs = tmp_path / "logs"
    argv = lake(logs, "--lm-model", str(gguf), "--lm-cache", str(LM_CACHE), "--lm-head", "scores", "--lm-lora", "4",
                "--lm-features", "onehot", "--iterations", "1", *SMALL)
    assert main(argv) == 0
    run = logs / "FrozenLake-v1" / "r"
    config = json.loads((run / "config.json").read_text())
    assert config["lora_rank"] == 4 and config["lora_targets"] == ["q_proj", "v_proj"]
    assert config["lora_trainable"] == 30 * 4 * ((576 + 576) + (576 + 192))
    params = load_checkpoint(run / "checkpoint.npz")["learner"]["state"]["policy"]
    lora_b = {k: v for k, v in params.items() if "lora_B" in k}
    lora_a = {k: v for k, v in params.items() if "lora_A" in k}
    assert len(lora_b) == len(lora_a) == 60
    assert sum(float(np.abs(v).sum()) for v in lora_b.values()) > 0  # zero at initialisation
    assert not any("base_layer" in k or "embed_tokens" in k for k in params)  # the frozen weights are never state
    assert (smollm2.model.layers[0].self_attn.q_proj.weight == q_before).all()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["lm_updates"] == 1 and summary["lm_model_passes"] >= 3


@needs_extra
@pytest.mark.slow
def test_a_lora_learners_state_is_arrays_that_restore_it(smollm2: Any, tmp_path: Path) -> None:
    """Fresh adapters score as the frozen model does; after an update, ``state_dict`` (arrays and JSON, the frozen
    weights left out) loaded into a new learner gives the same policy, and the adapters round-trip through a
    safetensors file."""
    import numpy as np

    from llm_policy_gen.envs import get_spec
    from llm_policy_gen.lm.agent import LearnerSettings
    from llm_policy_gen.lm.features import features_table
    from llm_policy_gen.lm.heads import ScoresLearner, lora_scores_head
    from llm_policy_gen.lm.lora import adapter_arrays, load_adapter, lora_model, save_adapter
    from llm_policy_gen.lm.scores import (
        ActionScorer,
        continuations,
        normalise,
        scoring_prompts,
        tokenize_task,
        word_counts,
    )
    from llm_policy_gen.run.learner_env import LearnerEnv

    spec = get_spec("FrozenLake-v1.deterministic")
    obs, acts = spec.observation_discretizer(), spec.action_discretizer()
    prompts, conts, words = scoring_prompts(spec, obs, acts), continuations(acts), word_counts(acts)
    task = tokenize_task(smollm2.tokenizer, prompts, conts)
    settings = LearnerSettings(n_steps=8, batch_size=8, n_epochs=1, seed=0)
    counter = iter(range(1000))

    def learner() -> ScoresLearner:
        head = lora_scores_head(lora_model(smollm2.model, 2, seed=0), task, words, "word")
        env = LearnerEnv(spec, lambda: next(counter), lambda e: e)
        return ScoresLearner(env, features_table("onehot", 16), settings, head)

    first = learner()
    sums, tokens = ActionScorer(smollm2, LM_CACHE).raw(prompts, conts)
    frozen = normalise(sums, tokens, words, "word")
    assert np.allclose(first.head.scores_of([0, 15]).detach().numpy(), frozen[[0, 15]], atol=1e-4)
    first.update()
    state = first.state_dict()
    assert all(isinstance(v, np.ndarray) for v in state["policy"].values())
    assert any("lora_B" in k for k in state["policy"]) and not any("base_layer" in k for k in state["policy"])
    assert "action_net.scores" not in state["policy"] and "features_extractor.table" not in state["policy"]
    second = learner()
    second.load_state_dict(state)
    assert second.steps == first.steps == 8 and second.updates == 1
    assert np.array_equal(second.probabilities(), first.probabilities())
    path = tmp_path / "adapter.safetensors"
    save_adapter(first.head.model, path)
    third = lora_model(smollm2.model, 2, seed=1)
    load_adapter(third, path)
    assert all(np.array_equal(a, b) for a, b in zip(adapter_arrays(third).values(),
                                                    adapter_arrays(first.head.model).values(), strict=True))


@needs_extra
@pytest.mark.slow
def test_a_stopped_lora_run_resumes_to_the_uninterrupted_runs_files(gguf: Path, tmp_path: Path) -> None:
    """``train --lm-lora`` stopped after one update and resumed to two writes what a two-update run writes: the same
    events, tables, summary and learner state (the adapters and their optimiser moments, restored from arrays)."""
    from run_helpers import run_records

    def run(logs: Path, iterations: int) -> Path:
        assert main(lake(logs, "--lm-model", str(gguf), "--lm-cache", str(LM_CACHE), "--lm-head", "scores",
                         "--lm-lora", "2", "--lm-features", "onehot", "--iterations", str(iterations),
                         "--lm-n-steps", "8", "--lm-batch-size", "8", "--lm-epochs", "1")) == 0
        return logs / "FrozenLake-v1" / "r"

    whole, part = run(tmp_path / "whole", 2), run(tmp_path / "part", 1)
    assert main(["train", "--resume", str(part), "--iterations", "2", "--lm-cache", str(LM_CACHE)]) == 0
    resumed, reference = run_records(part), run_records(whole)
    assert resumed == reference
    adapters = {k for k in reference["learner"]["state"]["policy"] if "lora_" in k}
    assert adapters and reference["learner"]["state"]["updates"] == 2
