"""The edits answer format: boxes of bins applied in order to the current table; through replayed runs too."""

import json

import numpy as np
import pytest

from llm_policy_gen.config import TrainConfig
from llm_policy_gen.discretize import BoxDiscretizer, DimSpec, DiscreteActions, DiscreteDiscretizer
from llm_policy_gen.envs import get_spec
from llm_policy_gen.errors import NoValidAnswer, ProposalError
from llm_policy_gen.formats import make_format
from llm_policy_gen.formats.base import MAX_ERRORS, FormatContext, Target, table_dims
from llm_policy_gen.formats.edits import EditsFormat, describe_edit_dims, table_as_edits
from llm_policy_gen.formats.table import TableFormat
from llm_policy_gen.policy import TablePolicy
from llm_policy_gen.run import train
from llm_policy_gen.storage.runlog import read_jsonl

CARTPOLE = BoxDiscretizer([DimSpec("x", -2.4, 2.4, 3), DimSpec("v", -3, 3, 3), DimSpec("angle", -0.2, 0.2, 6),
                           DimSpec("omega", -3, 3, 6)])
GRID = DiscreteDiscretizer(16, (4, 4))
NUMBERED = DiscreteDiscretizer(500)
EDITS = EditsFormat()


def ctx(table, n_actions=2, obs=CARTPOLE):
    return FormatContext(obs, DiscreteActions(n_actions), np.asarray(table), Target("action", n_actions=n_actions))


def apply(text, table, n_actions=2, obs=CARTPOLE):
    return EDITS.parse(text, ctx(table, n_actions, obs))


def render(cur, new, obs, rationale="why", n_actions=4):
    return EDITS.render(new, ctx(cur, n_actions, obs), rationale)


def answer(*edits, rationale="r"):
    return json.dumps({"rationale": rationale, "edits": list(edits)})


def edit(action, *conds):
    return {"conditions": [{"dim": d, "min_bin": lo, "max_bin": hi} for d, lo, hi in conds], "action": action}


def errors_of(text, table=None, n_actions=2, obs=CARTPOLE):
    table = np.zeros(obs.n_states, dtype=np.int64) if table is None else table
    with pytest.raises(ProposalError) as info:
        apply(text, table, n_actions, obs)
    return info.value.errors


def test_dims_are_the_discretizers_dimensions():
    assert table_dims(CARTPOLE) == (3, 3, 6, 6)
    assert table_dims(GRID) == (4, 4)
    assert table_dims(NUMBERED) == (500,)
    assert describe_edit_dims(CARTPOLE)[2] == "dim 2 = angle: bins 0..5"
    assert describe_edit_dims(GRID) == ["dim 0 = row: bins 0..3", "dim 1 = col: bins 0..3"]
    assert describe_edit_dims(NUMBERED) == ["dim 0 = state index: bins 0..499"]


def test_conditions_wildcards_and_order():
    cur = np.zeros(324, dtype=np.int64)
    text = answer(edit(1), edit(0, (2, 0, 2)), edit(1, (2, 2, 2), (3, 4, 5)))
    p = apply("Here you go:\n```json\n" + text + "\n```", cur, 2, CARTPOLE)
    expected = np.ones((3, 3, 6, 6), dtype=np.int64)
    expected[:, :, 0:3, :] = 0
    expected[:, :, 2, 4:6] = 1
    assert np.array_equal(p.value, expected.reshape(-1))
    # angle bins 0..2 are matched by the first two edits (or three)
    assert p.notes == ["162 states matched by several edits: the last matching edit counts"]
    assert p.n_changed == int(expected.sum())
    assert np.all(cur == 0)  # applied on a copy


def test_grid_and_numbered_states():
    p = apply(answer(edit(2, (0, 3, 3), (1, 0, 1))), np.zeros(16, dtype=np.int64), 4, GRID)
    assert np.flatnonzero(p.value).tolist() == [12, 13] and p.n_changed == 2 and p.notes == []
    p = apply(answer(edit(5, (0, 100, 199))), np.zeros(500, dtype=np.int64), 6, NUMBERED)
    assert np.flatnonzero(p.value).tolist() == list(range(100, 200))


def test_edits_that_change_nothing_are_noted():
    cur = np.zeros(16, dtype=np.int64)
    p = apply(answer(edit(0), edit(1, (0, 0, 0)), edit(0, (0, 3, 3), (1, 0, 0))), cur, 4, GRID)
    assert p.value[:4].tolist() == [1, 1, 1, 1] and p.n_changed == 4
    assert "2 of 3 edits changed no state" in p.notes


@pytest.mark.parametrize("obs", [CARTPOLE, GRID, NUMBERED], ids=["box", "grid", "numbered"])
def test_render_then_apply_gives_exactly_the_new_table(obs):
    rng = np.random.default_rng(0)
    n = obs.n_states
    for trial in range(60):
        cur = rng.integers(0, 4, n)
        new = cur.copy()
        k = int(rng.integers(0, n))
        idx = rng.choice(n, k, replace=False)
        new[idx] = rng.integers(0, 4, k)
        if trial % 6 == 0:
            new = np.where(rng.random(n) < 0.5, 1, 2)
        if trial % 10 == 0:
            new = cur.copy()
        if trial % 15 == 0:
            new = np.full(n, 3)
        text = render(cur, new, obs)
        parsed = apply(text, cur, 4, obs)
        assert np.array_equal(parsed.value, new), trial
        assert parsed.n_changed == int(np.sum(cur != new))


def test_edits_are_compact_for_a_few_changes():
    rng = np.random.default_rng(1)
    cur = rng.integers(0, 2, 324)
    new = cur.copy()
    new[[7, 8, 9, 100]] = 1 - new[[7, 8, 9, 100]]
    full = TableFormat().render(new, ctx(cur), "why")
    edits = render(cur, new, CARTPOLE, n_actions=2)
    assert len(edits) < len(full) / 10
    assert len(json.loads(edits)["edits"]) <= 4


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (answer(edit(1, (4, 0, 0))), "edits[0].conditions[0]: dim 4 out of range 0..3"),
        (answer(edit(1, (-1, 0, 0))), "dim -1 out of range"),
        (answer(edit(1, (2, 0, 6))), "dim 2 (angle) bins must be in 0..5, got min_bin 0, max_bin 6"),
        (answer(edit(1, (0, -1, 1))), "bins must be in 0..2"),
        (answer(edit(1, (2, 4, 1))), "edits[0].conditions[0]: min_bin 4 > max_bin 1"),
        (answer(edit(2)), "edits[0]: action 2 out of range 0..1"),
        (answer(edit(0), edit(-1)), "edits[1]: action -1 out of range"),
        (answer(edit(1, (2, 0, 1), (2, 3, 4))), "dim 2 listed twice in one edit"),
        (answer(), "edits is empty"),
        ('{"rationale": "r", "edits": [{"conditions": [{"dim": "2", "min_bin": 0, "max_bin": 1}], "action": 1}]}',
         "edits[0].conditions[0].dim"),
        ('{"rationale": "r", "edits": [{"conditions": [], "action": 1.0}]}', "edits[0].action"),
        ('{"rationale": "r", "edits": [{"conditions": [], "action": true}]}', "edits[0].action"),
        ('{"rationale": "r", "edits": [{"conditions": [{"dim": 0, "min_bin": 0}], "action": 1}]}', "max_bin"),
        ('{"rationale": "r", "edits": [{"conditions": [], "action": 1, "state": 3}]}', "edits[0].state"),
        ('{"rationale": "r", "edits": {"conditions": [], "action": 1}}', "edits"),
        ('{"edits": [{"conditions": [], "action": 1}]}', "rationale"),
        ('{"rationale": "r", "rows": [{"state": 0, "action": 1}]}', "no JSON object with a 'edits' field"),
        ("push left whenever the pole leans left", "no JSON object found"),
        ('{"rationale": "r", "edits": [{"conditions": [], "action": 1}', "invalid or truncated JSON"),
    ],
)
def test_malformed_edits_are_refused_with_a_message(text, needle):
    errs = errors_of(text)
    assert any(needle in e for e in errs), errs


def test_errors_are_capped():
    text = answer(*[edit(9, (7, 0, 0)) for _ in range(20)])
    errs = errors_of(text)
    assert len(errs) == MAX_ERRORS + 1 and errs[-1].startswith("... and")


def test_registry_gives_the_edits_format_and_schema_is_strict():
    cur = np.zeros(16, dtype=np.int64)
    fmt = make_format("edits")
    assert isinstance(fmt, EditsFormat) and fmt.name == "edits"
    p = fmt.parse(answer(edit(1, (0, 0, 0))), ctx(cur, 4, GRID))
    assert p.value[:4].tolist() == [1, 1, 1, 1]
    schema = fmt.json_schema(ctx(cur, 4, GRID))
    objects = [schema, *schema["$defs"].values()]
    for obj in objects:  # what OpenAI's strict structured output requires
        assert obj["additionalProperties"] is False
        assert sorted(obj["required"]) == sorted(obj["properties"])


# ----------------------------------------------------------------- through the loop, replayed


def _write(path, texts):
    path.write_text("".join(json.dumps({"response_text": t}) + "\n" for t in texts))
    return f"replay:{path}"


def _table(run_dir, iteration):
    return TablePolicy.load(run_dir / "policies" / f"iter_{iteration:04d}.json").table


def test_replayed_edits_give_the_same_tables_as_full_tables(tmp_path):
    spec = get_spec("CartPole-v1")
    shape = tuple(d.bins for d in spec.dims)
    # Iteration 1, on the blank table (all 0): push right (1) when the pole leans right (angle bins 3..5).
    t1 = spec.default_table().reshape(shape).copy()
    t1[:, :, 3:6, :] = 1
    e1 = answer(edit(1, (2, 3, 5)), rationale="lean right -> push right")
    # Iteration 2, on t1 (kept, checked below): follow the angular velocity when the pole is near upright.
    t2 = t1.copy()
    t2[:, :, 2:4, 3:6] = 1
    t2[:, :, 2:4, 0:3] = 0
    e2 = answer(edit(1, (2, 2, 3), (3, 3, 5)), edit(0, (3, 0, 2), (2, 2, 3)), rationale="react to omega")
    # Hand-written replay lines answer candidate 1 of iterations 1, 2, ...: one candidate per iteration.
    common = dict(env_id="CartPole-v1", iterations=2, progress=False, plots=False, heldout_episodes=5, seed=0,
                  candidates=1)
    quiet = lambda _m: None  # noqa: E731
    edits_run = train(TrainConfig(**common, backend=_write(tmp_path / "e.jsonl", [e1, e2]), output_format="edits",
                                  logs_dir=str(tmp_path / "edits")), log=quiet)
    table = TableFormat()
    blank = ctx(spec.default_table(), obs=spec.observation_discretizer())
    t_answers = [table.render(t.reshape(-1), blank, why) for t, why in ((t1, "a"), (t2, "b"))]
    table_run = train(TrainConfig(**common, output_format="table", logs_dir=str(tmp_path / "table"),
                                  backend=_write(tmp_path / "t.jsonl", t_answers)), log=quiet)
    events = read_jsonl(edits_run.run_dir / "events.jsonl")
    assert events[0]["accepted"] is True
    for it, expected in ((1, t1), (2, t2)):
        assert np.array_equal(_table(edits_run.run_dir, it), expected.reshape(-1))
        assert np.array_equal(_table(table_run.run_dir, it), expected.reshape(-1))
    assert edits_run.summary["best_eval_mean"] == table_run.summary["best_eval_mean"]
    transcripts = read_jsonl(edits_run.run_dir / "transcripts.jsonl")
    assert all(t["valid"] for t in transcripts)
    assert '"edits"' in transcripts[0]["messages"][-1]["content"]  # the prompt explains the edits format
    assert all(t["format"] == "edits" for t in transcripts)
    config = json.loads((edits_run.run_dir / "config.json").read_text())
    assert config["output_format"] == "edits"
    assert json.loads((table_run.run_dir / "config.json").read_text())["output_format"] == "table"


def test_malformed_replayed_edits_are_never_adopted(tmp_path):
    bad = answer(edit(1, (2, 3, 9)))  # bin 9 does not exist for the pole angle
    # its only answer refused: the run ends as a failure (exit 1 on the command line), its files written
    with pytest.raises(NoValidAnswer, match="no answer of this run was valid"):
        train(TrainConfig(env_id="CartPole-v1", iterations=1, progress=False, plots=False, heldout_episodes=5,
                          output_format="edits", repair_attempts=0, logs_dir=str(tmp_path / "logs"), candidates=1,
                          backend=_write(tmp_path / "bad.jsonl", [bad])), log=lambda _m: None)
    (run_dir,) = (tmp_path / "logs" / "CartPole-v1").iterdir()
    assert json.loads((run_dir / "summary.json").read_text())["stop_reason"] == "failed: no answer was valid"
    event = read_jsonl(run_dir / "events.jsonl")[0]
    assert event["accepted"] is False and event["eval_mean"] is None and event["valid"] is False
    assert any("bins must be in 0..5" in e for e in event["validation_errors"])
    best = TablePolicy.load(run_dir / "best_policy.json").table
    assert np.array_equal(best, get_spec("CartPole-v1").default_table())
    assert json.loads((run_dir / "policies" / "iter_0001.json").read_text())["meta"]["candidate"] is None


def test_table_as_edits_covers_the_table_once():
    spec = get_spec("BipedalWalker-v3")
    obs, prior = spec.observation_discretizer(), spec.prior_table()
    boxes = table_as_edits(prior, obs)
    assert len(boxes) == 2  # the prior depends on the hull angle only
    sizes = list(table_dims(obs))

    def size(box):
        spans = {c["dim"]: c["max_bin"] - c["min_bin"] + 1 for c in box["conditions"]}
        return int(np.prod([spans.get(j, n) for j, n in enumerate(sizes)]))

    assert sum(size(b) for b in boxes) == 10_000  # the boxes cover every state once
    edits = [{"conditions": b["conditions"], "action": b["entry"]} for b in boxes]
    rebuilt = apply(json.dumps({"rationale": "", "edits": edits}), np.zeros(10_000, dtype=np.int64), 81, obs)
    assert np.array_equal(rebuilt.value, prior) and rebuilt.notes == []  # no state matched twice


def test_big_tables_sort_their_regions_the_same_whether_keys_are_packed_or_not(monkeypatch):
    # Regions are sorted on one packed integer key while it fits 62 bits, else on one key per range bound (a table
    # whose boxes have more distinct ranges than that); both give the same regions in the same order.
    from llm_policy_gen.formats import edits

    rng = np.random.default_rng(3)
    obs = BoxDiscretizer([DimSpec(f"d{j}", -1, 1, b) for j, b in enumerate((3, 4, 2, 5, 3))])
    sizes = table_dims(obs)
    block = (np.indices(sizes)[1] // 2 + np.indices(sizes)[3] // 3).reshape(-1) % 3  # regions spanning dims
    tables = [block, np.where(rng.random(obs.n_states) < 0.1, 3, block), rng.integers(0, 4, obs.n_states)]
    packed = [table_as_edits(t, obs) for t in tables]
    monkeypatch.setattr(edits, "_PACK_BELOW", 0)
    assert [table_as_edits(t, obs) for t in tables] == packed
    for t, boxes in zip(tables, packed, strict=True):
        changes = [{"conditions": b["conditions"], "action": b["entry"]} for b in boxes]
        rebuilt = apply(json.dumps({"rationale": "", "edits": changes}), np.full(obs.n_states, 4), 5, obs)
        assert np.array_equal(rebuilt.value, t) and rebuilt.notes == []  # every state covered, each once
    assert len(packed[0]) < 20 < len(packed[1])  # a regular table in few regions
