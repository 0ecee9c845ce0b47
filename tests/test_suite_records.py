"""The goal suite's committed records (issue 61 item 3): imported from the old bench files with the cell keys the
suite computes, so the runner takes them as finished cells; the references (random policy, prior) beside them."""

from __future__ import annotations

from pathlib import Path

from llm_policy_gen.suites.cells import key_of
from llm_policy_gen.suites.definition import load_suite
from llm_policy_gen.suites.references import read_references
from llm_policy_gen.suites.store import latest, read_records

STORE = Path(__file__).resolve().parents[1] / "llm_policy_gen" / "suites" / "data" / "goals"


def test_every_offline_cell_of_the_goal_table_has_a_committed_record_under_its_key() -> None:
    suite = load_suite("goals")
    cells = latest(read_records(STORE))
    offline = suite.method("offline")
    for task in suite.tasks:
        for seed in task.seeds:
            key = key_of(task, offline, seed, {"max_episodes": task.budget})
            record = cells[key]
            assert (record.task, record.method, record.seed) == (task.key, "offline", seed)
            assert record.heldout is not None and record.source.startswith("imported: ")


def test_a_record_run_at_other_settings_keeps_them_and_is_another_cell() -> None:
    suite = load_suite("goals")
    hopper = suite.task("hopper")
    old = [r for r in read_records(STORE) if r.task == "hopper" and r.method == "q-learning"]
    assert len(old) == 10 and all(r.settings == {"iterations": 100_000} for r in old)  # before Hopper's re-tuning
    today = {key_of(hopper, suite.method("q-learning"), s, {"max_episodes": hopper.budget}) for s in hopper.seeds}
    assert not today & {r.cell for r in old}


def test_the_peers_at_offline_steps_are_keyed_by_the_steps_they_were_given() -> None:
    suite = load_suite("goals")
    records = read_records(STORE)
    ppo = [r for r in records if r.task == "cartpole" and r.method == "ppo-at-offline"]
    assert len(ppo) == 10
    for r in ppo:
        assert set(r.budget) == {"max_steps"} and r.result["peer_source"].startswith("rl-zoo3 ")
        assert r.cell == key_of(suite.task("cartpole"), suite.method("ppo-at-offline"), r.seed, r.budget)


def test_the_references_give_the_random_policy_and_the_prior_per_seed() -> None:
    refs = read_references(STORE)
    assert refs.heldout_episodes == 100
    assert refs.random_policy["cartpole"][0] == 22.46 and refs.prior["cartpole"][0] == 200.3
    assert set(refs.random_policy) >= {t.key for t in load_suite("goals").tasks}


def test_the_random_policy_is_measured_for_a_new_seed_as_the_imported_ones_were(tmp_path: Path) -> None:
    import shutil

    from llm_policy_gen.suites.references import add_random_policy

    shutil.copy(STORE / "references.json", tmp_path / "references.json")
    before = read_references(tmp_path)
    imported = before.random_policy["cartpole"][0]
    added = add_random_policy(tmp_path, {"cartpole": "CartPole-v1"}, [("cartpole", 0), ("cartpole", 999)])
    after = read_references(tmp_path)
    assert 999 not in before.random_policy["cartpole"] and added == 1
    assert after.random_policy["cartpole"][0] == imported == 22.46  # kept: the old scores' measure
    assert 5 < after.random_policy["cartpole"][999] < 60
    fresh = tmp_path / "fresh"
    assert add_random_policy(fresh, {"cartpole": "CartPole-v1"}, [("cartpole", 0)]) == 1  # measured as imported
    assert read_references(fresh).random_policy["cartpole"][0] == imported
    assert add_random_policy(tmp_path, {"cartpole": "CartPole-v1"}, [("cartpole", 999)]) == 0
