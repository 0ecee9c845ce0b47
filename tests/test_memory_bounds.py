"""Settings whose arrays would not fit in memory are refused before any directory exists (issue 59, item 5): a table
of a million states by 729 actions, ``--lm-n-steps 1000000000``, ``--lm-net-arch 2000000000``, ``--lm-lora 100000``;
and the lm-policy read-out one-hot encodes its states in batches of bounded size, to the same table."""

from __future__ import annotations

import importlib
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_command_line import one_line

from llm_policy_gen.cli import main
from llm_policy_gen.errors import UserError
from llm_policy_gen.storage.sizes import MEMORY_CAP, check_memory, memory_limit

HUGE = '''
import gymnasium as gym


class Huge(gym.Env):
    """A million states, 729 actions: each alone within the caps, their table of cells not."""

    def __init__(self):
        self.observation_space = gym.spaces.Discrete(1_000_000)
        self.action_space = gym.spaces.Discrete(729)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return 0, {}

    def step(self, action):
        return 1, 0.0, True, False, {}


gym.register("LPGHuge-v0", entry_point=Huge, max_episode_steps=5)
'''


@pytest.fixture
def huge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "lpg_huge_env.py").write_text(textwrap.dedent(HUGE))
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module("lpg_huge_env")
    return "lpg_huge_env:LPGHuge-v0"


def _refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], *argv: str, staged: bool = False) -> str:
    """``train ARGV`` refused: exit 2, one line (returned), and no directory made (``staged``: a run refused while
    it was built in its hidden folder, which is removed, leaves the logs folder empty)."""
    logs = tmp_path / "logs"
    code = main(["train", *argv, "--iterations", "1", "--heldout-episodes", "2", "--logs-dir", str(logs),
                 "--run-id", "r", "--no-plots", "--no-progress"])
    err = capsys.readouterr().err
    # a refusal made once the model is loaded (``staged``) follows the load's progress lines
    line = one_line("\n".join(x for x in err.splitlines() if not (staged and x.startswith("lm-policy: load"))))
    assert code == 2, line
    if staged:
        assert not list(logs.rglob("*"))
    else:
        assert not logs.exists()  # no run directory, not even logs/<env-id>/
    return line


def test_the_limit_is_the_cap_or_half_the_machine_and_the_refusal_names_the_largest_need() -> None:
    assert 0 < memory_limit() <= MEMORY_CAP
    check_memory([("small", 2**20), ("smaller", 2**10)])
    with pytest.raises(UserError, match=r"^big needs 6\.0 GiB of memory \(11\.0 GiB in all\), over the limit of "):
        check_memory([("other", 5 * 2**30), ("big", 6 * 2**30)])
    with pytest.raises(UserError, match=r"^huge needs 60\.0 GiB of memory, over"):  # a KiB more is not "in all"
        check_memory([("huge", 60 * 2**30), ("tiny", 2**10)])


@pytest.mark.parametrize("method", [["--mode", "q-learning"], ["--backend", "offline"]], ids=["q-learning", "offline"])
def test_a_table_too_large_for_memory_is_refused_before_any_directory(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], huge: str, method: list[str]) -> None:
    line = _refused(tmp_path, capsys, "--env", huge, *method)
    assert line.startswith("llm-policy-gen train: error: a table of 1,000,000 states x 729 actions (16 bytes per "
                           "cell) needs 10.9 GiB of memory"), line
    assert "over the limit of" in line


LM = ("--env", "FrozenLake-v1", "--mode", "lm-policy", "--lm-features", "onehot")


@pytest.mark.parametrize(("flag", "value", "shown"), [
    ("--lm-n-steps", "1000000000", "the rollout buffer of --lm-n-steps 1,000,000,000 (64 bytes a step) needs 59.6 GiB"),
    ("--lm-net-arch", "2000000000", "the head's "),
    ("--lm-batch-size", "100000000", "a minibatch of 100,000,000 states (--lm-batch-size)"),
])
def test_lm_policy_settings_too_large_for_memory_are_refused_before_any_directory(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str, shown: str) -> None:
    extra = ("--lm-n-steps", "100000000") if flag == "--lm-batch-size" else ()
    line = _refused(tmp_path, capsys, *LM, flag, value, *extra)
    assert shown in line and "over the limit of" in line, line


def test_a_lora_rank_past_the_bound_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = _refused(tmp_path, capsys, *LM, "--lm-head", "scores", "--lm-lora", "100000")
    assert line == "llm-policy-gen train: error: bad --lm-lora 100000: accepted an integer in 0..1024", line


@pytest.mark.slow
@pytest.mark.xdist_group("smollm2-torch")  # as the other language-model tests (test_lm_policy.py says why)
def test_a_lora_rank_over_the_model_hidden_size_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           gguf: Path) -> None:
    pytest.importorskip("peft")
    from test_lm_policy import LM_CACHE

    line = _refused(tmp_path, capsys, *LM, "--lm-head", "scores", "--lm-lora", "1000", "--lm-model", str(gguf),
                    "--lm-cache", str(LM_CACHE), staged=True)
    assert line.endswith("error: bad --lm-lora 1000: over the model's hidden size (576); accepted 1..576"), line


# ---------------------------------------------------------------------------------------------- the read-out
def _learner(n_states: int) -> Any:
    pytest.importorskip("stable_baselines3")
    import gymnasium as gym

    from llm_policy_gen.lm.agent import LearnerSettings, TableLearner

    class Line(gym.Env[int, int]):
        def __init__(self) -> None:
            self.observation_space = gym.spaces.Discrete(n_states)
            self.action_space = gym.spaces.Discrete(3)

        def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[int, dict]:
            super().reset(seed=seed)
            return 0, {}

        def step(self, action: int) -> tuple[int, float, bool, bool, dict]:
            return 0, 0.0, True, False, {}

    features = np.random.default_rng(0).standard_normal((n_states, 8)).astype(np.float32)
    return TableLearner(Line(), features, LearnerSettings(n_steps=16, batch_size=8, seed=0))


def test_the_read_out_one_hot_encodes_bounded_batches_and_gives_the_same_table(
        monkeypatch: pytest.MonkeyPatch) -> None:
    learner = _learner(5000)
    policy = learner.model.policy
    whole = policy.obs_to_tensor
    batches: list[int] = []

    def spy(obs: np.ndarray) -> Any:
        batches.append(len(obs))
        return whole(obs)

    monkeypatch.setattr(policy, "obs_to_tensor", spy)
    batched = learner.probabilities()
    assert max(batches) * 5000 * 4 <= 64 * 2**20 and sum(batches) == 5000, batches  # 100 MB at once, before
    monkeypatch.setattr("llm_policy_gen.lm.agent.READOUT_BATCH_BYTES", 2**40)
    batches.clear()
    assert np.array_equal(learner.probabilities(), batched) and batches == [5000]
