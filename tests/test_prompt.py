"""The prompt: every section from its context, bounded size, the answer format's own section, and mode templates."""

import json
import re
from pathlib import Path

import numpy as np

from llm_policy_gen.collect import Episode
from llm_policy_gen.envs import get_spec
from llm_policy_gen.formats import make_format
from llm_policy_gen.formats.base import Target
from llm_policy_gen.prompting.builder import HistoryEntry, PromptBuilder, PromptContext
from llm_policy_gen.prompting.evidence_text import evidence_by_dimension
from llm_policy_gen.prompting.memory import ExperienceMemory

HISTORY = [
    HistoryEntry(1, 20.0, 3, True, 5),
    HistoryEntry(2, 12.5, 3, False, 7),
    HistoryEntry(3, None, 3, False, 0, "bad json"),
]


def context(spec, episode_len=50, n_episodes=6, fmt="table", target=None, table=None, history=HISTORY, **kw):
    obs, acts = spec.observation_discretizer(), spec.action_discretizer()
    mem = ExperienceMemory(obs.n_states, acts.n_actions)
    rng = np.random.default_rng(0)
    for i in range(n_episodes):
        n = episode_len + i
        mem.add([Episode(i, rng.integers(0, obs.n_states, n), rng.integers(0, acts.n_actions, n), np.ones(n), True,
                         False, i)])
    return PromptContext(
        spec=spec, observation=obs, actions=acts, iteration=4,
        current_table=spec.default_table() if table is None else table, best_test_mean=20.0, test_episodes=3,
        memory=mem, evidence=mem.evidence(), fmt=make_format(fmt),
        target=target or Target("action", n_actions=acts.n_actions), history=list(history), **kw)


def test_prompt_holds_every_section():
    spec = get_spec("CartPole-v1")
    system, user = PromptBuilder().build(context(spec))
    assert system.role == "system" and user.role == "user"
    text = user.content
    for part in ("CartPole", "dim 2 pole angle rad, 6 bins: 0=[-0.209,-0.14)", "push cart left", "Physics hints",
                 "Pushing the cart", "iteration 1: 20.0 on 3 episodes, kept as best", "refused (bad json)",
                 "best 1", "worst 1", "Evidence per state", "s0-5 (0, 0, 0)", '"rows"', "0..323",
                 "best so far 20.0", "Experience (iteration 4)"):
        assert part in text, part
    assert "$" not in text  # every placeholder filled
    # history: best last
    assert text.index("iteration 2: 12.5") < text.index("iteration 1: 20.0")


def test_prompt_size_is_bounded_however_long_the_episodes():
    spec = get_spec("CartPole-v1")
    short = sum(len(m.content) for m in PromptBuilder().build(context(spec, 20, 2)))
    long = sum(len(m.content) for m in PromptBuilder().build(context(spec, 5000, 40)))
    assert long < 12000 and short < 12000
    tight = PromptBuilder(max_chars=5000).build(context(spec, 500, 10))
    assert "less visited states left out" in tight[1].content


def test_frozen_lake_prompt_shows_the_grid():
    spec = get_spec("FrozenLake-v1")
    _, user = PromptBuilder().build(context(spec, 10, 2))
    assert "row 3 (s12-15): 0 0 0 0" in user.content
    assert "move down" in user.content and "4x4 grid" in user.content


def test_repair_message_lists_errors():
    msg = PromptBuilder().repair(["rows[0]: state 9 out of range 0..5"])
    assert "- rows[0]: state 9 out of range 0..5" in msg and "corrected" in msg


def test_history_names_candidates_and_unconfirmed_winners_and_drops_equal_outcomes():
    spec = get_spec("CartPole-v1")
    history = [
        HistoryEntry(1, 30.0, 3, False, 4, candidate=1),
        HistoryEntry(1, 55.0, 3, False, 6, candidate=2, confirmed=False),
        HistoryEntry(2, 30.04, 3, False, 2, candidate=3),  # shown as 30.0 like the first: only the latest is kept
    ]
    text = PromptBuilder().history(context(spec, history=history, candidates=3))
    assert text.splitlines() == [
        "iteration 2 candidate 3: 30.0 on 3 episodes, not better, reverted, 2 states changed",
        "iteration 1 candidate 2: 55.0 on 3 episodes, best on the test episodes but not confirmed on fresh episodes, "
        "reverted, 6 states changed",
    ]
    one = PromptBuilder().history(context(spec, history=history[:1], candidates=1))
    assert one.startswith("iteration 1: 30.0")
    assert PromptBuilder().history(context(spec, history=[])) == "(no earlier candidates yet)"


def test_edits_format_and_big_tables_as_regions():
    spec = get_spec("BipedalWalker-v3")
    ctx = context(spec, 30, 3, fmt="edits", table=spec.prior_table(), history=[])
    _, user = PromptBuilder().build(ctx)
    text = user.content
    assert '"edits"' in text and "dim 0 = " in text and "0..9999" in text and '"rows"' not in text
    assert "The table as regions of equal action" in text  # 10,000 rows would not fit
    assert ctx.output_format == "edits" and len(text) < 14000


def test_value_tables_show_numbers():
    spec = get_spec("FrozenLake-v1")
    values = np.linspace(-1, 1, 16)
    ctx = context(spec, 10, 2, table=values, target=Target("value", low=-5, high=5, meaning="potential"),
                  history=[])
    _, user = PromptBuilder().build(ctx)
    text = user.content
    assert "values are the values of the 4 cells of the row" in text
    assert "row 0 (s0-3): -1 -0.867 -0.733 -0.6" in text
    assert '"value": <number>' in text and "a number in [-5, 5]" in text
    assert " | now " in text and " | now a" not in text
    fctx = ctx.format_context()
    assert fctx.target.kind == "value" and np.array_equal(fctx.current, values)


def test_a_mode_brings_its_own_templates_and_sections(tmp_path: Path):
    (tmp_path / "mine_system.md").write_text("You advise.")
    (tmp_path / "mine_user.md").write_text("Task $env_id\n$advice\n# Evidence\n$evidence\n# Format\n$format")
    spec = get_spec("FrozenLake-v1")
    ctx = context(spec, 10, 2, templates=("mine_system.md", "mine_user.md"), sections={"advice": "Go right."})
    system, user = PromptBuilder(templates=tmp_path).build(ctx)
    assert system.content == "You advise."
    assert user.content.startswith("Task FrozenLake-v1\nGo right.\n# Evidence\ns") and '"rows"' in user.content


def test_rules_prompts_show_the_rules_and_summaries_never_the_table():
    spec = get_spec("BipedalWalker-v3")  # 10,000 states
    rules = {"format": "rules", "version": 1, "cases": [],
             "linear": [{"output": d, "weights": [0.5, 0.0, -0.25, 0.1], "bias": 0.0, "thresholds": [-0.3, 0.3]}
                        for d in range(4)], "otherwise": None}
    body = {k: v for k, v in rules.items() if k in ("cases", "linear", "otherwise")}
    table = make_format("rules").parse(json.dumps({"rationale": "r", **body}),
                                       context(spec, fmt="rules").format_context()).value
    ctx = context(spec, 40, 6, fmt="rules", table=table, current_source=rules, history=[])
    _, user = PromptBuilder().build(ctx)
    text = user.content
    assert "The current rules (the table is compiled from them):" in text
    assert '"weights":[0.5,0.0,-0.25,0.1]' in text
    # never an "otherwise": null the answer schema refuses (linear rules decide; the value shown is ignored)
    assert '"otherwise":null' not in text and re.search(r'"otherwise":\d+\}', text)
    assert "The table as regions" not in text and "s0-9 " not in text  # never the table itself
    assert "Summed over the other dimensions (10000 states" in text
    assert "dim 0 hull angle: b" in text and "G " in text and "end " in text
    assert "(t:bins:action:reward)" in text and len(text) < 14000  # 81 action lines take 3,000
    assert '"linear": [{"output": <int>' in text  # the format section
    # without rules behind it, the kept table is shown as an equal decision list
    plain = context(spec, 10, 2, fmt="rules", table=spec.prior_table(), history=[])
    shown = PromptBuilder().build(plain)[1].content
    assert "The current table, written as rules (it was not compiled from rules):" in shown
    assert '"otherwise":' in shown


def test_per_dimension_evidence_adds_up():
    spec = get_spec("CartPole-v1")
    ctx = context(spec, 30, 4, fmt="rules")
    rows = evidence_by_dimension(ctx.evidence, ctx.observation)
    steps = int(ctx.evidence.visits.sum())
    assert f"{steps} steps" in rows[0] and len(rows) == 1 + 4
    shares = [float(part.split()[1].rstrip("%")) for part in rows[3].split(": ", 1)[1].split(" | ")]
    assert abs(sum(shares) - 100) <= len(shares)  # rounded shares of the steps


def test_the_tables_text_is_written_again_only_when_the_table_changes(monkeypatch):
    # Between adoptions the current table stays the same; a big table's rules or regions take seconds to write.
    import llm_policy_gen.prompting.builder as prompt

    calls = []
    real = prompt.table_text
    monkeypatch.setattr(prompt, "table_text", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    spec = get_spec("CartPole-v1")
    builder = PromptBuilder()
    table = spec.default_table()
    first = builder.build(context(spec, table=table))[1].content
    assert builder.build(context(spec, table=table.copy()))[1].content == first and len(calls) == 1
    changed = table.copy()
    changed[:40] = 1 - changed[:40]
    assert builder.build(context(spec, table=changed))[1].content != first and len(calls) == 2
    table[:40] = changed[:40]  # the same values in another array, changed in place: still the same text
    builder.build(context(spec, table=table))
    assert len(calls) == 2
    builder.build(context(spec, table=table, fmt="rules"))  # rules answers show it as rules
    assert len(calls) == 3
