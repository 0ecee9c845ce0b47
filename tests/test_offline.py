"""The offline optimiser: not an LLM, answers as valid text in the run's format, deterministic, steered by history."""

import json

import numpy as np

from llm_policy_gen.backends import BACKENDS, parse_backend_spec
from llm_policy_gen.envs import get_spec
from llm_policy_gen.formats import make_format
from llm_policy_gen.formats.base import Target
from llm_policy_gen.memory import ExperienceMemory
from llm_policy_gen.prompt import HistoryEntry, PromptBuilder, PromptContext
from llm_policy_gen.proposers.base import Proposer
from llm_policy_gen.proposers.offline import OfflineProposer
from llm_policy_gen.session import Transcript


def ctx_for(spec, iteration=1, table=None, history=(), memory=None, best=None, fmt="table", k=1):
    obs, acts = spec.observation_discretizer(), spec.action_discretizer()
    mem = memory or ExperienceMemory(obs.n_states, acts.n_actions)
    table = spec.default_table() if table is None else table
    return PromptContext(spec=spec, observation=obs, actions=acts, iteration=iteration, current_table=table,
                         best_eval_mean=best, eval_episodes=3, memory=mem, evidence=mem.evidence(),
                         fmt=make_format(fmt), target=Target("action", n_actions=acts.n_actions),
                         history=list(history), candidates=k)


def tables(proposer, ctx, k=1):
    answers = proposer.propose(ctx, PromptBuilder().build(ctx), k)
    assert [a.candidate for a in answers] == list(range(1, k + 1)) and all(a.ok for a in answers)
    return [a.parsed.value for a in answers]


def test_offline_is_labelled_not_an_llm():
    name, model = parse_backend_spec("offline")
    assert (name, model) == ("offline", "") and BACKENDS.entry("offline").info["is_llm"] is False
    b = BACKENDS.load("offline")(seed=2)
    assert isinstance(b, OfflineProposer) and isinstance(b, Proposer) and b.is_llm is False
    d = b.describe()
    assert "not an LLM" in d["note"] and d["is_llm"] is False and d["seed"] == 2


def test_first_answer_is_the_prior_rule_as_valid_text():
    spec = get_spec("CartPole-v1")
    lines = []
    transcript = Transcript(None, {})
    transcript.write = lines.append  # type: ignore[method-assign]
    b = OfflineProposer(transcript=transcript)
    ctx = ctx_for(spec)
    messages = PromptBuilder().build(ctx)
    (a,) = b.propose(ctx, messages, 1)
    assert a.ok and a.usage.calls == 1 and a.usage.input_tokens == a.usage.output_tokens == 0
    assert np.array_equal(a.parsed.value, spec.prior_table())
    assert "prior rule" in json.loads(a.text)["rationale"]
    # The same transcript line an LLM call writes, saying it is not an LLM.
    (line,) = lines
    assert line["iteration"] == 1 and line["candidate"] == 1 and line["attempt"] == 1 and line["valid"] is True
    assert "not an LLM" in line["model"] and line["response_text"] == a.text
    assert line["messages"] == [m.to_dict() for m in messages] and line["cost_usd"] == 0.0


def test_same_context_same_answer_and_rejections_change_the_search():
    spec = get_spec("CartPole-v1")

    def run(accept_second):
        b = OfflineProposer()
        answers = []
        (t1,) = tables(b, ctx_for(spec, 1))
        answers.append(t1)
        hist = [HistoryEntry(1, 200.0, 3, True, 10)]
        (t2,) = tables(b, ctx_for(spec, 2, t1, hist, best=200.0))
        answers.append(t2)
        hist = hist + [HistoryEntry(2, 300.0 if accept_second else 100.0, 3, accept_second, 10)]
        cur = t2 if accept_second else t1
        answers += tables(b, ctx_for(spec, 3, cur, hist, best=300.0 if accept_second else 200.0))
        return answers

    a, b_ = run(True), run(True)
    assert all(np.array_equal(x, y) for x, y in zip(a, b_, strict=True))
    assert not np.array_equal(a[1], a[0])  # a new candidate each time
    c = run(False)
    assert not np.array_equal(a[2], c[2])  # the verdict in the history steers the next proposal


def test_k_candidates_differ_and_the_first_is_the_prior():
    spec = get_spec("CartPole-v1")
    ctx = ctx_for(spec, k=4)
    first = tables(OfflineProposer(seed=0), ctx, 4)
    assert np.array_equal(first[0], spec.prior_table())
    assert len({t.tobytes() for t in first}) == 4 and not any(np.array_equal(t, ctx.current_table) for t in first)
    again = tables(OfflineProposer(seed=0), ctx_for(spec, k=4), 4)
    assert all(np.array_equal(x, y) for x, y in zip(first, again, strict=True))
    other_seed = tables(OfflineProposer(seed=1), ctx_for(spec, k=4), 4)
    assert np.array_equal(other_seed[0], first[0]) and not np.array_equal(other_seed[1], first[1])


def test_state_round_trip_continues_the_same_search():
    spec = get_spec("CartPole-v1")
    a = OfflineProposer(seed=3)
    (t1, _) = tables(a, ctx_for(spec, 1, k=2), 2)
    hist = [HistoryEntry(1, 200.0, 3, True, 10, candidate=1), HistoryEntry(1, 50.0, 3, False, 10, candidate=2)]
    b = OfflineProposer(seed=3)
    b.load_state_dict(a.state_dict())
    from_a = tables(a, ctx_for(spec, 2, t1, hist, best=200.0, k=2), 2)
    from_b = tables(b, ctx_for(spec, 2, t1, hist, best=200.0, k=2), 2)
    assert all(np.array_equal(x, y) for x, y in zip(from_a, from_b, strict=True))
    fresh = tables(OfflineProposer(seed=3), ctx_for(spec, 2, t1, hist, best=200.0, k=2), 2)
    assert not all(np.array_equal(x, y) for x, y in zip(from_a, fresh, strict=True))  # the state mattered


def test_model_move_explores_untried_actions_without_a_prior():
    spec = get_spec("FrozenLake-v1")
    ctx = ctx_for(spec)
    (t,) = tables(OfflineProposer(), ctx)
    assert not np.array_equal(t, ctx.current_table)


def test_answers_use_the_runs_format():
    spec = get_spec("CartPole-v1")
    ctx = ctx_for(spec, fmt="edits")
    (a,) = OfflineProposer().propose(ctx, [], 1)
    assert a.ok and "edits" in json.loads(a.text) and np.array_equal(a.parsed.value, spec.prior_table())
