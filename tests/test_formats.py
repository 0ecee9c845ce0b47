"""Answer formats: the full-table answer, the shared JSON helpers, targets (actions or values) and the registry.

The edits format has its own file (test_edits.py); here both are checked against action and value targets.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from llm_policy_gen.discretize import BoxDiscretizer, DimSpec, DiscreteActions, DiscreteDiscretizer
from llm_policy_gen.errors import ProposalError, UserError
from llm_policy_gen.formats import FORMATS, make_format, resolve_format_name
from llm_policy_gen.formats.action import ActionFormat
from llm_policy_gen.formats.base import (
    MAX_ERRORS,
    AnswerFormat,
    FormatContext,
    Target,
    cap_errors,
    extract_json_object,
)
from llm_policy_gen.formats.edits import EditsFormat
from llm_policy_gen.formats.table import TableFormat

CUR = np.zeros(6, dtype=np.int64)
ACTION = Target("action", n_actions=2)
VALUE = Target("value", low=-10, high=10, meaning="shaping potential")
BOX = BoxDiscretizer([DimSpec("x", -1.0, 1.0, 3), DimSpec("v", -2.0, 2.0, 4)])


def fctx(current: np.ndarray = CUR, target: Target = ACTION, obs: Any = None) -> FormatContext:
    obs = DiscreteDiscretizer(len(current)) if obs is None else obs
    return FormatContext(obs, DiscreteActions(max(2, target.n_actions)), np.asarray(current), target)


def parse(text: str, current: np.ndarray = CUR, target: Target = ACTION, obs: Any = None) -> Any:
    return TableFormat().parse(text, fctx(current, target, obs))


def answer(rows: list[tuple[int, Any]], rationale: str = "r", field: str = "action") -> str:
    return json.dumps({"rationale": rationale, "rows": [{"state": s, field: a} for s, a in rows]})


def refusal(fmt: AnswerFormat[Any], text: str, ctx: FormatContext) -> list[str]:
    with pytest.raises(ProposalError) as info:
        fmt.parse(text, ctx)
    assert info.value.raw_text == text
    return info.value.errors


# ------------------------------------------------------------------------------------------ the table format
def test_full_answer_becomes_the_table() -> None:
    p = parse(answer([(s, s % 2) for s in range(6)], rationale="alternate"))
    assert p.value.tolist() == [0, 1, 0, 1, 0, 1] and p.value.dtype == np.int64
    assert (p.n_changed, p.notes, p.rationale) == (3, [], "alternate")


def test_prose_and_code_fences_are_skipped() -> None:
    text = "Sure! Here is the table:\n```json\n" + answer([(1, 1)]) + "\n```\nHope it helps {not json}"
    assert parse(text).value.tolist() == [0, 1, 0, 0, 0, 0]
    text2 = "I think so. " + answer([(2, 1)]) + " done."
    assert parse(text2).value[2] == 1
    first_other = '{"note": "not this one"} and then ' + answer([(3, 1)])
    assert parse(first_other).value[3] == 1  # the first object holding "rows"


def test_duplicates_take_the_last_row_and_missing_keep_current() -> None:
    cur = np.array([1, 1, 1, 1, 1, 1])
    p = parse(answer([(0, 0), (0, 1), (3, 0)]), cur)
    assert p.value.tolist() == [1, 1, 1, 0, 1, 1] and p.n_changed == 1
    assert "1 duplicate state rows: the last row of each state was used" in p.notes
    assert "4 states missing: they keep their current action" in p.notes
    assert cur.tolist() == [1] * 6  # parsed on a copy


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("I would push left when the pole leans left.", "no JSON object found"),
        ('{"rationale": "x", "rows": [{"state": 1, "act', "truncated JSON"),
        (answer([(9, 0)]), "rows[0]: state 9 out of range 0..5"),
        (answer([(1, 2)]), "rows[0]: action 2 out of range 0..1 (state 1)"),
        (answer([(1, -1)]), "action -1 out of range"),
        ('{"rationale": "x", "rows": [{"state": "1", "action": 0}]}', "valid integer"),
        ('{"rationale": "x", "rows": [{"state": 1, "action": 1.5}]}',
         "rows[0].action: Input should be a valid integer"),
        ('{"rationale": "x", "rows": [{"state": 1, "action": true}]}', "valid integer"),
        ('{"rationale": "x", "rows": []}', "rows is empty: give a action for states 0..5"),
        ("", "empty answer"),
        ('{"rationale": "x", "table": [0, 1]}', "no JSON object with a 'rows' field"),
        ('{"rows": [{"state": 1, "action": 1}]}', "rationale"),
        ('{"rationale": "x", "rows": [{"state": 1, "action": 1, "why": "y"}]}', "Extra inputs"),
        ('{"rationale": "x", "rows": [{"state": 1, "value": 0.5}]}', "rows[0].action"),
    ],
)
def test_bad_answers_are_refused_with_repair_messages(text: str, fragment: str) -> None:
    errors = refusal(TableFormat(), text, fctx())
    assert any(fragment in e for e in errors), errors
    assert all(len(e) < 200 for e in errors)


def test_error_list_is_capped() -> None:
    errors = refusal(TableFormat(), answer([(100 + i, 0) for i in range(30)]), fctx())
    assert len(errors) == MAX_ERRORS + 1 and errors[-1] == f"... and {30 - MAX_ERRORS} more errors"
    typed = json.dumps({"rationale": "r", "rows": [{"state": str(i), "action": 0} for i in range(20)]})
    errors = refusal(TableFormat(), typed, fctx())
    assert len(errors) == MAX_ERRORS + 1 and errors[-1] == f"... and {20 - MAX_ERRORS} more type errors"
    assert cap_errors(["a"] * 3) == ["a"] * 3


def test_rendered_answer_parses_back_and_schema_is_strict() -> None:
    table = np.array([1, 0, 1, 1, 0, 0])
    fmt = TableFormat()
    text = fmt.render(table, fctx(), 'why "quoted"')
    p = fmt.parse(text, fctx())
    assert p.value.tolist() == table.tolist() and p.rationale == 'why "quoted"'
    for target, row in ((ACTION, "ActionRow"), (VALUE, "ValueRow")):
        schema = fmt.json_schema(fctx(target=target))
        assert set(schema["required"]) == {"rationale", "rows"}
        for obj in (schema, *schema["$defs"].values()):  # what OpenAI's strict structured output requires
            assert obj["additionalProperties"] is False and sorted(obj["required"]) == sorted(obj["properties"])
        assert set(schema["$defs"][row]["properties"]) == {"state", target.field}


# ------------------------------------------------------------------------------------------ action and value targets
def test_targets_check_describe_and_type_their_entries() -> None:
    assert ACTION.field == "action" and VALUE.field == "value"
    assert ACTION.check(1) is None and ACTION.check(2) == "action 2 out of range 0..1"
    assert VALUE.check(-10.0) is None and VALUE.check(10) is None
    assert VALUE.check(10.5) == "value 10.5 out of range [-10, 10]"
    assert VALUE.check(float("nan")) is not None and VALUE.check(float("inf")) is not None
    assert ACTION.describe() == "an integer action in 0..1" and VALUE.describe() == "a number in [-10, 10]"
    assert ACTION.array([1, 0]).dtype == np.int64 and VALUE.array([1, 0]).dtype == np.float64


FORMAT_CLASSES = [TableFormat, EditsFormat]


@pytest.mark.parametrize("fmt_cls", FORMAT_CLASSES, ids=["table", "edits"])
@pytest.mark.parametrize("obs", [BOX, DiscreteDiscretizer(12, (3, 4)), DiscreteDiscretizer(12)],
                         ids=["box", "grid", "numbered"])
def test_render_then_parse_round_trips_values_exactly(fmt_cls: type, obs: Any) -> None:
    fmt = fmt_cls()
    rng = np.random.default_rng(0)
    awkward = np.array([0.1 + 0.2, 1 / 3, -9.999999999999998, 1e-300, 5e-324, 10.0, -10.0, 2.0 ** -40, 7.1])
    for trial in range(25):
        cur = rng.uniform(-10, 10, 12)
        new = cur.copy()
        idx = rng.choice(12, int(rng.integers(1, 12)), replace=False)
        new[idx] = rng.choice(awkward, idx.size) if trial % 2 else rng.uniform(-10, 10, idx.size)
        if trial % 5 == 0:
            new = np.full(12, rng.choice(awkward))
        if trial == 7:
            new = cur.copy()  # nothing changes: still a valid answer
        ctx = fctx(cur, VALUE, obs)
        text = fmt.render(new, ctx, "why")
        p = fmt.parse(text, ctx)
        assert p.value.dtype == np.float64 and p.value.tobytes() == new.tobytes(), (trial, text)
        assert p.n_changed == int(np.sum(new != cur))


@pytest.mark.parametrize("fmt_cls", FORMAT_CLASSES, ids=["table", "edits"])
def test_render_then_parse_round_trips_actions(fmt_cls: type) -> None:
    fmt = fmt_cls()
    rng = np.random.default_rng(1)
    target = Target("action", n_actions=5)
    for _ in range(20):
        cur, new = rng.integers(0, 5, 12), rng.integers(0, 5, 12)
        ctx = FormatContext(BOX, DiscreteActions(5), cur, target)
        assert np.array_equal(fmt.parse(fmt.render(new, ctx, "r"), ctx).value, new)


def test_value_answers_accept_integers_and_refuse_what_is_out_of_range() -> None:
    cur = np.zeros(6)
    p = parse(answer([(0, 3), (1, -2.5)], field="value"), cur, VALUE)
    assert p.value.tolist() == [3.0, -2.5, 0, 0, 0, 0] and p.value.dtype == np.float64
    assert "4 states missing: they keep their current value" in p.notes
    cases = [
        (answer([(0, 10.5)], field="value"), "rows[0]: value 10.5 out of range [-10, 10] (state 0)"),
        (answer([(2, -11)], field="value"), "rows[0]: value -11.0 out of range [-10, 10] (state 2)"),
        ('{"rationale": "r", "rows": [{"state": 0, "value": NaN}]}', "rows[0]: value nan out of range"),
        ('{"rationale": "r", "rows": [{"state": 0, "value": Infinity}]}', "rows[0]: value inf out of range"),
        ('{"rationale": "r", "rows": [{"state": 0, "value": "1"}]}', "rows[0].value: Input should be a valid number"),
        (answer([(0, 1)]), "rows[0].value: Field required"),
    ]
    for text, fragment in cases:
        errors = refusal(TableFormat(), text, fctx(cur, VALUE))
        assert any(fragment in e for e in errors), (fragment, errors)


def test_edits_answers_for_values_name_the_field() -> None:
    fmt, cur = EditsFormat(), np.zeros(12)
    ctx = fctx(cur, VALUE, BOX)
    good = json.dumps({"rationale": "r", "edits": [{"conditions": [{"dim": 0, "min_bin": 2, "max_bin": 2}],
                                                    "value": 2.5}]})
    assert fmt.parse(good, ctx).value.reshape(3, 4)[2].tolist() == [2.5] * 4
    bad = json.dumps({"rationale": "r", "edits": [{"conditions": [], "value": 12.0},
                                                   {"conditions": [], "action": 1}]})
    assert refusal(fmt, bad, ctx) == ["edits[1].value: Field required (got dict)",
                                      "edits[1].action: Extra inputs are not permitted (got 1)"]
    errors = refusal(fmt, json.dumps({"rationale": "r", "edits": [{"conditions": [], "value": 12.0}]}), ctx)
    assert errors == ["edits[0]: value 12.0 out of range [-10, 10]"]
    errors = refusal(fmt, json.dumps({"rationale": "r", "edits": [{"conditions": [], "action": 3}]}),
                     fctx(np.zeros(12, np.int64), ACTION, BOX))
    assert errors == ["edits[0]: action 3 out of range 0..1"]


@pytest.mark.parametrize("fmt_cls", FORMAT_CLASSES, ids=["table", "edits"])
def test_prompt_sections_describe_the_target(fmt_cls: type) -> None:
    fmt = fmt_cls()
    act = fmt.prompt_section(fctx(np.zeros(12, np.int64), ACTION, BOX))
    val = fmt.prompt_section(fctx(np.zeros(12), VALUE, BOX))
    assert '"action": <int>' in act and "an integer action in 0..1" in act and "$" not in act
    assert '"value": <number>' in val and "a number in [-10, 10]" in val and '"action"' not in val and "$" not in val
    assert "0..11" in act and "0..11" in val


# ------------------------------------------------------------------------------------------ helpers, action, registry
def test_extract_json_object_errors() -> None:
    assert extract_json_object('x {"a": 1} y {"rows": [], "b": {"c": 2}} z', "rows") == {"rows": [], "b": {"c": 2}}
    for text, message in [("   ", "empty answer"), ('{"a": 1}', "no JSON object with a 'rows' field"),
                          ('{"rows": [1, ', "invalid or truncated JSON"), ("{oops}", "invalid or truncated JSON"),
                          ("plain words", "no JSON object found")]:
        with pytest.raises(ProposalError) as info:
            extract_json_object(text, "rows")
        assert message in info.value.errors[0], (text, info.value.errors)


def test_action_format_round_trips_plain_text() -> None:
    fmt = ActionFormat()
    ctx = FormatContext(DiscreteDiscretizer(4), DiscreteActions(3), np.zeros(0, np.int64), Target("action",
                                                                                                   n_actions=3))
    assert fmt.json_schema(ctx) is None
    for a in range(3):
        assert fmt.parse(fmt.render(a, ctx, "because"), ctx).value == a
    assert "Action:" in fmt.render(2, ctx, "") and "2" in fmt.prompt_section(ctx)
    with pytest.raises(ProposalError, match="out of range 0..2"):
        fmt.parse("Action: 3", ctx)


def test_registry_lists_and_builds_the_formats() -> None:
    assert {"table", "edits", "action"} <= set(FORMATS.names())
    for name, cls in (("table", TableFormat), ("edits", EditsFormat), ("action", ActionFormat)):
        fmt = make_format(name)
        assert isinstance(fmt, cls) and isinstance(fmt, AnswerFormat) and fmt.name == name
    assert resolve_format_name("auto", 1000) == "table" and resolve_format_name("auto", 1001) == "edits"
    assert resolve_format_name("edits", 4) == "edits"
    with pytest.raises(UserError, match=r"unknown answer format 'tabel' for --output-format; did you mean table"):
        make_format("tabel")
