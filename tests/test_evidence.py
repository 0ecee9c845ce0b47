"""``--evidence extremes|summary|both`` (issue 20 item 4a): which episodes a prompt shows, their statistics, the
median episode, and the prompt's cap with each choice."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from llm_policy_gen.cli import main
from llm_policy_gen.collect import Episode
from llm_policy_gen.envs import get_spec
from llm_policy_gen.formats import make_format
from llm_policy_gen.formats.base import Target
from llm_policy_gen.prompting.builder import PromptBuilder, PromptContext
from llm_policy_gen.prompting.memory import ExperienceMemory, episode_stats, median_episode
from llm_policy_gen.storage.runlog import read_jsonl

#: Returns of the episodes in memory, in arrival order: best 90 (iteration 2), worst 1 (iteration 3).
RETURNS = [5, 90, 1, 30, 40, 20, 10]


def context(env_id: str = "CartPole-v1", fmt: str = "table", returns: list[int] = RETURNS,
            length: int = 40) -> PromptContext:
    """Episodes whose rewards sum to ``returns``, all of ``length`` steps; episode k ends in state k."""
    spec = get_spec(env_id)
    obs, acts = spec.observation_discretizer(), spec.action_discretizer()
    mem = ExperienceMemory(obs.n_states, acts.n_actions)
    rng = np.random.default_rng(0)
    for k, ret in enumerate(returns):
        states = rng.integers(0, obs.n_states, length)
        states[-1] = k
        rewards = np.zeros(length)
        rewards[0] = ret
        mem.add([Episode(k, states, rng.integers(0, acts.n_actions, length), rewards, k % 3 != 0, k % 3 == 0,
                         iteration=k + 1)])
    return PromptContext(spec=spec, observation=obs, actions=acts, iteration=8, current_table=spec.default_table(),
                         best_test_mean=20.0, test_episodes=3, memory=mem, evidence=mem.evidence(),
                         fmt=make_format(fmt), target=Target("action", n_actions=acts.n_actions), worst_k=1,
                         best_k=2)


def user_text(builder: PromptBuilder, ctx: PromptContext) -> str:
    return builder.build(ctx)[1].content


def test_extremes_is_the_default_and_shows_the_best_and_worst_episodes_only() -> None:
    ctx = context()
    text = user_text(PromptBuilder(), ctx)
    assert text == user_text(PromptBuilder(evidence="extremes"), ctx)
    assert "best 1 (iteration 2): return 90.0" in text and "best 2 (iteration 5): return 40.0" in text
    assert "worst 1 (iteration 3): return 1.0" in text
    assert "Summary of the last" not in text and "median episode" not in text


def test_summary_shows_statistics_and_the_median_episode_instead_of_the_extremes() -> None:
    ctx = context()
    text = user_text(PromptBuilder(evidence="summary"), ctx)
    assert "best 1" not in text and "worst 1" not in text
    # returns 5 90 1 30 40 20 10: mean 28.0, median 20.0; 3 ended by the time limit (episodes 0, 3, 6)
    assert ("Summary of the last 7 episodes (iterations 1-7): return mean 28.0, median 20.0, std 28.4, min 1.0, "
            "max 90.0; length mean 40.0 steps, min 40, max 40; ended: 4 terminated, 3 at the time limit.") in text
    assert "- median episode (iteration 6): return 20.0, 40 steps, terminated." in text
    assert "Per dimension over every step of these episodes (bin centres in the observation's units)" in text
    assert "dim 2 pole angle: mean " in text and "; last step " in text
    # the experience section's order: header, summary, median, dimensions
    assert text.index("episodes in memory") < text.index("Summary of") < text.index("median episode") \
        < text.index("dim 0 cart position: mean")


def test_summary_statistics_are_those_of_the_recent_episodes() -> None:
    ctx = context()
    builder = PromptBuilder(evidence="summary", recent_episodes=3)
    text = user_text(builder, ctx)
    # the last three: returns 40 20 10 (iterations 5-7)
    assert "Summary of the last 3 episodes (iterations 5-7): return mean 23.3, median 20.0" in text
    assert "median episode (iteration 6)" in text
    recent = ctx.memory.recent(3)
    assert [e.ret for e in recent] == [40.0, 20.0, 10.0]
    obs = ctx.observation
    values = [(b[:-1] + b[1:]) / 2 for b in obs.boundaries]  # type: ignore[attr-defined]
    st = episode_stats(recent, tuple(obs.bins), values)  # type: ignore[attr-defined]
    ends = np.array([np.unravel_index(k, tuple(obs.bins)) for k in (4, 5, 6)])  # type: ignore[attr-defined]
    assert np.allclose(st.last, [values[j][ends[:, j]].mean() for j in range(4)])
    assert np.all(st.low <= st.mean) and np.all(st.mean <= st.high)


def test_median_episode_is_the_lower_middle_return() -> None:
    assert median_episode([]) is None
    eps = context().memory.episodes
    assert median_episode(eps) is eps[5]  # 20 of 1 5 10 20 30 40 90
    assert median_episode(eps[:2]) is eps[0]  # 5 of 5 90: the lower middle


def test_both_shows_the_summary_then_the_extremes() -> None:
    text = user_text(PromptBuilder(evidence="both"), context())
    assert text.index("Summary of the last 7") < text.index("median episode") < text.index("best 1 (iteration 2)") \
        < text.index("worst 1 (iteration 3)")


def test_grid_worlds_are_summarised_by_row_and_column() -> None:
    text = user_text(PromptBuilder(evidence="summary"), context("FrozenLake-v1", returns=[0, 1, 0, 0, 1]))
    assert "(grid rows and columns)" in text and "dim 0 row: mean " in text and "dim 1 col: mean " in text


@pytest.mark.parametrize("evidence", ["extremes", "summary", "both"])
@pytest.mark.parametrize("fmt", ["table", "rules"])
def test_every_choice_keeps_the_prompt_under_its_cap(evidence: str, fmt: str) -> None:
    """Evidence rows are cut (table answers), and with a summary the episode lines too; rules prompts with the
    extremes only keep today's fixed-length excerpts whole."""
    ctx = context(fmt=fmt, returns=list(range(60)), length=300)
    wide = sum(len(m.content) for m in PromptBuilder(max_chars=10**6, evidence=evidence).build(ctx))
    for cap in (12000, 4500) if fmt == "table" else (5500,):  # a rules prompt without episodes: 4,900
        size = sum(len(m.content) for m in PromptBuilder(max_chars=cap, evidence=evidence).build(ctx))
        if fmt == "table" or evidence != "extremes":
            assert size <= cap < wide, (cap, size, wide)


def test_a_tight_cap_drops_the_last_episode_lines_first() -> None:
    ctx = context(fmt="rules", returns=list(range(60)), length=300)
    full = PromptBuilder(max_chars=10**6, evidence="both").episode_lines(ctx)
    text = user_text(PromptBuilder(max_chars=6000, evidence="both"), ctx)
    assert "lines left out to fit the prompt's cap" in text
    assert full[1] in text  # the summary's first line stays
    assert full[-1] not in text  # the worst episode goes first
    # below what the rest of the prompt needs, every line but the header goes (the cap holds when it can)
    text = user_text(PromptBuilder(max_chars=3000, evidence="both"), ctx)
    assert f"{len(ctx.memory)} episodes in memory." in text and f"({len(full) - 1} lines left out" in text


def test_a_token_cap_is_kept_the_same_way() -> None:
    ctx = context(fmt="rules", returns=list(range(60)), length=300)
    def tokens(text: str) -> int:
        return len(text) // 2

    wide = sum(tokens(m.content) for m in PromptBuilder(max_chars=10**6, evidence="summary").build(ctx))
    builder = PromptBuilder(evidence="summary")
    builder.measure_in_tokens(2800, tokens)
    size = sum(tokens(m.content) for m in builder.build(ctx))
    assert size <= 2800 < wide


def test_a_bad_choice_is_refused() -> None:
    with pytest.raises(ValueError, match="bad evidence 'median'"):
        PromptBuilder(evidence="median")


def test_the_option_reaches_the_prompts_of_a_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def prompts(evidence: str) -> list[str]:
        def run_with(backend: str, run_id: str) -> Path:
            assert main(["train", "--env", "CartPole-v1", "--backend", backend, "--iterations", "2", "--candidates",
                         "2", "--evidence", evidence, "--logs-dir", str(tmp_path), "--run-id", run_id, "--no-plots",
                         "--no-progress", "--quiet", "--heldout-episodes", "5"]) == 0, capsys.readouterr().err
            return tmp_path / "CartPole-v1" / run_id

        run = run_with("offline", evidence)
        assert json.loads((run / "config.json").read_text())["config"]["evidence"] == evidence
        again = run_with(f"replay:{run}", f"{evidence}-replayed")  # a replay asks the prompts too
        return [r["messages"][1]["content"] for r in read_jsonl(again / "transcripts.jsonl")]

    summary, extremes = prompts("summary"), prompts("extremes")
    assert all("Summary of the last" in p and "best 1" not in p for p in summary)
    assert all("Summary of the last" not in p and "best 1" in p for p in extremes)
