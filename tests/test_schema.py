import json

import numpy as np
import pytest

from llm_policy_gen.errors import ProposalError
from llm_policy_gen.schema import json_schema_for, parse_proposal, render_table_answer

CUR = np.zeros(6, dtype=np.int64)


def answer(rows, rationale="r"):
    return json.dumps({"rationale": rationale, "rows": [{"state": s, "action": a} for s, a in rows]})


def test_full_answer_becomes_the_table():
    p = parse_proposal(answer([(s, s % 2) for s in range(6)]), CUR, 2)
    assert p.table.tolist() == [0, 1, 0, 1, 0, 1]
    assert (p.n_missing, p.n_duplicates, p.n_changed) == (0, 0, 3)


def test_prose_and_code_fences_are_skipped():
    text = "Sure! Here is the table:\n```json\n" + answer([(1, 1)]) + "\n```\nHope it helps {not json}"
    assert parse_proposal(text, CUR, 2).table.tolist() == [0, 1, 0, 0, 0, 0]
    text2 = "I think so. " + answer([(2, 1)]) + " done."
    assert parse_proposal(text2, CUR, 2).table[2] == 1


def test_duplicates_take_the_last_row_and_missing_keep_current():
    cur = np.array([1, 1, 1, 1, 1, 1])
    p = parse_proposal(answer([(0, 0), (0, 1), (3, 0)]), cur, 2)
    assert p.table.tolist() == [1, 1, 1, 0, 1, 1]
    assert p.n_duplicates == 1 and p.n_missing == 4
    assert any("duplicate" in n for n in p.notes) and any("missing" in n for n in p.notes)


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("I would push left when the pole leans left.", "no JSON object found"),
        ('{"rationale": "x", "rows": [{"state": 1, "act', "truncated JSON"),
        (answer([(9, 0)]), "state 9 out of range 0..5"),
        (answer([(1, 2)]), "action 2 out of range 0..1"),
        ('{"rationale": "x", "rows": [{"state": "1", "action": 0}]}', "valid integer"),
        ('{"rationale": "x", "rows": [{"state": 1, "action": 1.5}]}', "valid integer"),
        ('{"rationale": "x", "rows": [{"state": 1, "action": true}]}', "valid integer"),
        ('{"rationale": "x", "rows": []}', "rows is empty"),
        ("", "empty answer"),
        ('{"rationale": "x", "table": [0, 1]}', "no JSON object with a 'rows' field"),
        ('{"rows": [{"state": 1, "action": 1}]}', "rationale"),
        ('{"rationale": "x", "rows": [{"state": 1, "action": 1, "why": "y"}]}', "Extra inputs"),
    ],
)
def test_bad_answers_are_refused_with_repair_messages(text, fragment):
    with pytest.raises(ProposalError) as info:
        parse_proposal(text, CUR, 2)
    assert any(fragment in e for e in info.value.errors), info.value.errors
    assert all(len(e) < 200 for e in info.value.errors)


def test_error_list_is_capped():
    with pytest.raises(ProposalError) as info:
        parse_proposal(answer([(100 + i, 0) for i in range(30)]), CUR, 2)
    assert len(info.value.errors) <= 9 and "more errors" in info.value.errors[-1]


def test_rendered_answer_parses_back_and_schema_is_strict():
    table = np.array([1, 0, 1, 1, 0, 0])
    assert parse_proposal(render_table_answer(table, "why"), CUR, 2).table.tolist() == table.tolist()
    schema = json_schema_for("table")
    assert schema["additionalProperties"] is False
    assert set(schema["required"]) == {"rationale", "rows"}
    assert schema["$defs"]["Row"]["additionalProperties"] is False
