"""``--lm-head scores``: the model's log-probabilities of each action's words as the policy's logits (issue 31 item 3).

SmolLM2-135M-Instruct through the safetensors cache, loaded once per module (``tests/test_lm_policy.py`` does the
same; a run in this process reuses the loaded model).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_lm_policy import LM_CACHE, lake, needs_extra, one_line, run_files

from llm_policy_gen.cli import main

# the language-model tests share one xdist worker (why: test_lm_policy.py)
pytestmark = pytest.mark.xdist_group("smollm2-torch")


@pytest.fixture(scope="module")
def smollm2(gguf: Path) -> Any:
    from llm_policy_gen.lm.backbone import load_language_model

    return load_language_model(gguf, LM_CACHE)


@needs_extra
def test_scores_and_lora_options_are_checked_before_any_run_directory(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    logs = tmp_path / "logs"
    assert main(lake(logs, "--lm-features", "onehot", "--lm-head", "scores")) == 2
    assert "--lm-head scores needs --lm-model" in one_line(capsys.readouterr().err)
    model = str(tmp_path / "m.gguf")
    assert main(lake(logs, "--lm-model", model, "--lm-lora", "4")) == 2
    assert "add --lm-head scores" in one_line(capsys.readouterr().err)
    assert main(lake(logs, "--lm-model", model, "--lm-lora", "4", "--lm-head", "scores", "--lm-learner", "trpo")) == 2
    assert "--lm-learner ppo" in one_line(capsys.readouterr().err)
    assert main(lake(logs, "--lm-lora", "-1")) == 2
    assert "lora" in one_line(capsys.readouterr().err)
    assert run_files(logs) == []


@needs_extra
@pytest.mark.slow
def test_the_zero_shot_scores_are_cached_reproducible_and_equal_the_padded_batch(smollm2: Any,
                                                                                tmp_path: Path) -> None:
    """One batch scores two FrozenLake-v1.deterministic states (each action's words after the shared prefix); a new
    scorer reads them from disk, one without a disk cache computes the same bits, and a value equals the sum of token
    log-probabilities of the whole prompt and action run as one plain sequence (to float32 rounding)."""
    import numpy as np
    import torch

    from llm_policy_gen.envs import get_spec
    from llm_policy_gen.lm.scores import ActionScorer, continuations, output_embeddings, scoring_prompts

    spec = get_spec("FrozenLake-v1.deterministic")
    acts = spec.action_discretizer()
    prompts, conts = scoring_prompts(spec, spec.observation_discretizer(), acts), continuations(acts)
    assert "Possible actions: move left, move down" in prompts[0] and conts[0] == " move left"
    prompts = [prompts[5], prompts[15]]  # two states keep the test short on a busy machine
    first = ActionScorer(smollm2, tmp_path)
    sums, tokens = first.raw(prompts, conts)
    assert first.forward_passes == 1 and sums.shape == (2, 4) and (sums < 0).all()
    again = ActionScorer(smollm2, tmp_path)
    assert all(np.array_equal(a, b) for a, b in zip(again.raw(prompts, conts), (sums, tokens), strict=True))
    assert again.forward_passes == 0 and again.disk_hits == 2
    fresh = ActionScorer(smollm2, None)
    assert np.array_equal(fresh.raw(prompts, conts)[0], sums) and fresh.forward_passes == 1
    tok = smollm2.tokenizer
    for s, a in ((1, 3),):
        ids = list(tok(prompts[s])["input_ids"])
        cont = list(tok(conts[a], add_special_tokens=False)["input_ids"])
        with torch.inference_mode():
            hidden = smollm2.model(input_ids=torch.tensor([ids + cont])).last_hidden_state[0]
            lp = torch.log_softmax(hidden @ output_embeddings(smollm2.model).T, dim=-1)
        plain = sum(float(lp[len(ids) - 1 + j, t]) for j, t in enumerate(cont))
        assert tokens[s, a] == len(cont) and abs(plain - sums[s, a]) < 1e-4, (s, a, plain, sums[s, a])


@needs_extra
@pytest.mark.slow
def test_a_scores_head_run_reads_out_the_zero_shot_table_then_trains_its_bias(smollm2: Any, gguf: Path,
                                                                             tmp_path: Path) -> None:
    """The run's zero-shot table is the argmax of the cached, word-normalised log-probabilities; the run trains
    end to end on FrozenLake-v1.deterministic (2 PPO updates of 64 steps), counts its episodes and changes the
    per-action bias."""
    import numpy as np

    from llm_policy_gen.envs import get_spec
    from llm_policy_gen.lm.scores import ActionScorer, continuations, normalise, scoring_prompts, word_counts

    logs = tmp_path / "logs"
    argv = lake(logs, "--lm-model", str(gguf), "--lm-cache", str(LM_CACHE), "--lm-head", "scores",
                "--lm-features", "onehot", "--iterations", "2", "--lm-n-steps", "64", "--seed", "0")
    assert main(argv) == 0
    run = logs / "FrozenLake-v1" / "r"
    config = json.loads((run / "config.json").read_text())
    assert config["head"] == "scores" and config["score_norm"] == "word" and config["lora_rank"] == 0
    assert config["lm_score_batches"] + config["lm_scores_from_cache"] in (1, 16)
    spec = get_spec("FrozenLake-v1.deterministic")
    acts = spec.action_discretizer()
    sums, tokens = ActionScorer(smollm2, LM_CACHE).raw(scoring_prompts(spec, spec.observation_discretizer(), acts),
                                                       continuations(acts))
    expected = np.argmax(normalise(sums, tokens, word_counts(acts), "word"), axis=1)
    assert config["zero_shot_table"] == expected.tolist()
    events = [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines()]
    assert [e["lm_steps"] for e in events] == [64, 128]
    assert all(len(e["train_returns"]) == e["lm_episodes"] > 0 for e in events)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["lm_updates"] == 2 and summary["episodes_total"] >= sum(e["lm_episodes"] for e in events)
    from llm_policy_gen.run.checkpoint import load_checkpoint

    params = load_checkpoint(run / "checkpoint.npz")["learner"]["state"]["policy"]
    assert params["action_net.bias"].shape == (4,) and np.abs(params["action_net.bias"]).sum() > 0  # zero at start
    assert not any("scores" in k for k in params)  # the frozen scores are rebuilt from the cache, never state


@needs_extra
@pytest.mark.slow
def test_a_model_whose_output_layer_is_not_its_embeddings_is_scored_with_its_own_output_layer(
        smollm2: Any, tmp_path: Path) -> None:
    """A folder model saved with a separate ``lm_head.weight`` (the case of Qwen2.5-Coder-0.5B's GGUF file, loaded
    untied): the scores are the full causal model's own token log-probabilities; the same model saved without its
    output layer is refused in one line."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from llm_policy_gen.errors import UserError
    from llm_policy_gen.lm.backbone import load_language_model
    from llm_policy_gen.lm.scores import ActionScorer

    torch.manual_seed(0)
    tok = smollm2.tokenizer
    cfg = LlamaConfig(vocab_size=smollm2.model.config.vocab_size, hidden_size=32, intermediate_size=64,
                      num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=False)
    full = LlamaForCausalLM(cfg).eval()
    assert not torch.equal(full.lm_head.weight, full.get_input_embeddings().weight)
    untied = tmp_path / "untied"
    full.save_pretrained(untied)
    tok.save_pretrained(untied)
    prompt, conts = "Position: row 2, column 3.\nBest action:", [" move left", " move down"]
    sums, _ = ActionScorer(load_language_model(untied, tmp_path / "cache"), None).raw([prompt], conts)
    ids = list(tok(prompt)["input_ids"])
    for a, c in enumerate(conts):
        cont = list(tok(c, add_special_tokens=False)["input_ids"])
        with torch.inference_mode():
            lp = torch.log_softmax(full(input_ids=torch.tensor([ids + cont])).logits[0], dim=-1)
        plain = sum(float(lp[len(ids) - 1 + j, t]) for j, t in enumerate(cont))
        assert abs(plain - float(sums[0, a])) < 1e-4, (a, plain, sums[0, a])
    headless = tmp_path / "headless"
    full.model.save_pretrained(headless)
    tok.save_pretrained(headless)
    with pytest.raises(UserError, match="lm_head.weight"):
        ActionScorer(load_language_model(headless, tmp_path / "cache"), None)
