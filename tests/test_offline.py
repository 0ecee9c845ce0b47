import json

import numpy as np

from llm_policy_gen.backends import make_backend
from llm_policy_gen.backends.base import OutputFormat
from llm_policy_gen.envs import get_spec
from llm_policy_gen.memory import ExperienceMemory
from llm_policy_gen.prompt import HistoryEntry, PromptBuilder, PromptContext
from llm_policy_gen.schema import json_schema_for, parse_proposal

OUT = OutputFormat("policy_table", json_schema_for("table"))


def ctx_for(spec, iteration=1, table=None, history=(), memory=None, best=None):
    obs, acts = spec.observation_discretizer(), spec.action_discretizer()
    mem = memory or ExperienceMemory(obs.n_states, acts.n_actions)
    table = spec.default_table() if table is None else table
    return PromptContext(spec, obs, acts, iteration, table, best, 3, mem, mem.evidence(), list(history))


def test_offline_is_labelled_not_an_llm():
    b = make_backend("offline")
    assert b.is_llm is False
    assert "not an LLM" in b.describe()["note"]


def test_first_answer_is_the_prior_rule_as_valid_text():
    spec = get_spec("CartPole-v1")
    b = make_backend("offline")
    ctx = ctx_for(spec)
    comp = b.complete(PromptBuilder().build(ctx), OUT, ctx)
    assert comp.input_tokens == 0 and comp.output_tokens == 0 and "not an LLM" in comp.model
    parsed = parse_proposal(comp.text, ctx.current_table, 2)
    assert np.array_equal(parsed.table, spec.prior_table())
    assert "prior rule" in json.loads(comp.text)["rationale"]


def test_same_context_same_answer_and_rejections_change_the_search():
    spec = get_spec("CartPole-v1")

    def run(accept_second):
        b = make_backend("offline")
        answers = []
        ctx = ctx_for(spec, 1)
        t1 = parse_proposal(b.complete([], OUT, ctx).text, ctx.current_table, 2).table
        answers.append(t1)
        hist = [HistoryEntry(1, 200.0, 3, True, 10)]
        ctx = ctx_for(spec, 2, t1, hist, best=200.0)
        t2 = parse_proposal(b.complete([], OUT, ctx).text, t1, 2).table
        answers.append(t2)
        hist = hist + [HistoryEntry(2, 300.0 if accept_second else 100.0, 3, accept_second, 10)]
        cur = t2 if accept_second else t1
        ctx = ctx_for(spec, 3, cur, hist, best=300.0 if accept_second else 200.0)
        answers.append(parse_proposal(b.complete([], OUT, ctx).text, cur, 2).table)
        return answers

    a, b_ = run(True), run(True)
    assert all(np.array_equal(x, y) for x, y in zip(a, b_, strict=True))
    assert not np.array_equal(a[1], a[0])  # a new candidate each time
    c = run(False)
    assert not np.array_equal(a[2], c[2])  # the verdict in the history steers the next proposal


def test_model_move_explores_untried_actions_without_a_prior():
    spec = get_spec("FrozenLake-v1")
    b = make_backend("offline")
    ctx = ctx_for(spec)
    t = parse_proposal(b.complete([], OUT, ctx).text, ctx.current_table, 4).table
    assert not np.array_equal(t, ctx.current_table)
