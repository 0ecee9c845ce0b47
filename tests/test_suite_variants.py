"""A task that is a spec variant of another (``variant_of``, issue 62 item 4): the zoo's PPO at its own budget reads
the raw observations, so its runs on LunarLander-v3.products and Hopper-v5.rich are the base task's; those cells are
listed as not run with that reason (never silently dropped), the README shows the base task's figures beside the
variant, and a ``variant_of`` naming no other task is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_bench_command import METHODS, TASKS, write_suite

from llm_policy_gen.cli import main
from llm_policy_gen.suites.definition import load_suite


def test_the_goal_tables_variants_name_their_base_task() -> None:
    suite = load_suite("goals")
    assert {t.key: t.variant_of for t in suite.tasks if t.variant_of} == {"lunarlander-products": "lunarlander",
                                                                          "hopper-rich": "hopper"}


@pytest.mark.parametrize(("task", "base"), [("lunarlander-products", "lunarlander"), ("hopper-rich", "hopper")])
def test_a_peer_at_its_own_budget_is_listed_as_the_base_tasks_runs(task: str, base: str, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "goals", "--tasks", task, "--methods", "ppo", "--seeds", "0", "--list",
                 "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert f"{task}/ppo seed 0: not run: the same run as on task {base}" in out
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("value", "says"), [("nowhere", "variant_of names 'nowhere', not another task of it"),
                                            ("cartpole", "variant_of names 'cartpole', not another task of it")])
def test_a_variant_of_no_other_task_is_refused_in_one_line(value: str, says: str, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    tasks = TASKS.replace('key = "cartpole"\n', f'key = "cartpole"\nvariant_of = "{value}"\n')
    suite = write_suite(tmp_path, METHODS, tasks)
    assert main(["bench", str(suite), "--list", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1
