import numpy as np

from llm_policy_gen.collect import Episode
from llm_policy_gen.envs import get_spec
from llm_policy_gen.memory import ExperienceMemory
from llm_policy_gen.prompt import HistoryEntry, PromptBuilder, PromptContext


def context(spec, episode_len=50, n_episodes=6):
    obs, acts = spec.observation_discretizer(), spec.action_discretizer()
    mem = ExperienceMemory(obs.n_states, acts.n_actions)
    rng = np.random.default_rng(0)
    for i in range(n_episodes):
        n = episode_len + i
        mem.add([Episode(i, rng.integers(0, obs.n_states, n), rng.integers(0, acts.n_actions, n), np.ones(n), True,
                         False, i)])
    history = [
        HistoryEntry(1, 20.0, 3, True, 5),
        HistoryEntry(2, 12.5, 3, False, 7),
        HistoryEntry(3, None, 3, False, 0, "bad json"),
    ]
    return PromptContext(spec, obs, acts, 4, spec.default_table(), 20.0, 3, mem, mem.evidence(), history)


def test_prompt_holds_every_section():
    spec = get_spec("CartPole-v1")
    system, user = PromptBuilder().build(context(spec))
    assert system.role == "system" and user.role == "user"
    text = user.content
    for part in ("CartPole", "dim 2 pole angle rad, 6 bins: 0=[-0.209,-0.14)", "push cart left", "Physics hints",
                 "Pushing the cart", "iteration 1: 20.0 on 3 episodes, kept as best", "refused (bad json)",
                 "best 1", "worst 1", "Evidence per state", "s0-5 (0, 0, 0)", '"rows"', "0..323"):
        assert part in text, part
    # history: best last
    assert text.index("iteration 2: 12.5") < text.index("iteration 1: 20.0")


def test_prompt_size_is_bounded_however_long_the_episodes():
    spec = get_spec("CartPole-v1")
    short = sum(len(m.content) for m in PromptBuilder().build(context(spec, 20, 2)))
    long = sum(len(m.content) for m in PromptBuilder().build(context(spec, 5000, 40)))
    assert long < 12000 and short < 12000


def test_frozen_lake_prompt_shows_the_grid():
    spec = get_spec("FrozenLake-v1")
    _, user = PromptBuilder().build(context(spec, 10, 2))
    assert "row 3 (s12-15): 0 0 0 0" in user.content
    assert "move down" in user.content and "4x4 grid" in user.content


def test_repair_message_lists_errors():
    msg = PromptBuilder().repair(["rows[0]: state 9 out of range 0..5"])
    assert "- rows[0]: state 9 out of range 0..5" in msg and "corrected" in msg
