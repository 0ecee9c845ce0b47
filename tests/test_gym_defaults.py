"""Specs run gymnasium's defaults under gymnasium's ids, or say where they differ (issue 59 item 11).

``FrozenLake-v1`` is gymnasium's slippery lake; the seed project's lake is ``FrozenLake-v1.deterministic``, and a run
directory from before the change still resumes, evaluates and re-runs on the lake it ran on. ``envs`` shows the
kwargs that differ from gymnasium's registration, the step limits a spec adds, and where each threshold comes from;
a threshold follows gymnasium's where gymnasium registers one for the same configuration.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from llm_policy_gen.cli import main
from llm_policy_gen.envs import get_spec, load_spec_file, make_env, shipped_env_ids
from llm_policy_gen.envs.catalog import shipped_spec_file, spec_variants
from llm_policy_gen.envs.gymdiff import gym_counterpart, gym_differences
from llm_policy_gen.run.files import RunDir

DATA = Path(__file__).parent / "data"
OLD_RUN = DATA / "flat_keys_run"
"""A FrozenLake-v1 run made when its spec was not slippery (its config.json records ``is_slippery: false``)."""


def _available(names: list[str]) -> list[str]:
    out = []
    for name in names:
        try:
            get_spec(name)
        except Exception:  # an extra that is not installed here
            continue
        out.append(name)
    return out


DEFAULTS = _available(shipped_env_ids())
EVERY = _available(sorted([*shipped_env_ids(), *spec_variants()]))


def _differences(name: str):  # type: ignore[no-untyped-def]
    path = shipped_spec_file(name)
    assert path is not None
    return gym_differences(get_spec(name), load_spec_file(path).reward_threshold)


def test_frozenlake_v1_is_gymnasiums_slippery_lake() -> None:
    spec = get_spec("FrozenLake-v1")
    ours, theirs = make_env(spec), gym.make("FrozenLake-v1")
    try:
        assert ours.unwrapped.P == theirs.unwrapped.P and np.array_equal(ours.unwrapped.desc, theirs.unwrapped.desc)
        assert spec.max_episode_steps == theirs.spec.max_episode_steps == 100
        assert spec.reward_threshold == theirs.spec.reward_threshold == 0.7
    finally:
        ours.close()
        theirs.close()
    assert "slippery" in spec.description and "not slippery" not in spec.hints_text


def test_the_deterministic_variant_is_the_old_default_spec() -> None:
    """What the old FrozenLake-v1 spec gave (recorded in a run of that time) is what the variant gives today, so its
    prompts and results are the old ones."""
    old = json.loads((OLD_RUN / "config.json").read_text(encoding="utf-8"))["env_spec"]
    new = get_spec("FrozenLake-v1.deterministic").to_dict()
    keys = ("env_id", "kwargs", "title", "description", "reward", "hints", "grid", "n_discrete_states",
            "action_names", "default_action", "reward_threshold", "max_episode_steps", "train_defaults")
    assert {k: new[k] for k in keys} == {k: old[k] for k in keys}
    assert new["kwargs"] == {"is_slippery": False, "map_name": "4x4"} and new["variant"] == "deterministic"


@pytest.mark.parametrize("name", DEFAULTS)
def test_a_default_spec_runs_gymnasiums_kwargs(name: str) -> None:
    assert _differences(name).kwargs == {}


@pytest.mark.parametrize("name", EVERY)
def test_a_step_limit_a_spec_changes_is_announced_in_its_task_text(name: str) -> None:
    diff = _differences(name)
    if diff.step_limit is not None:
        assert f"after {diff.step_limit[0]} steps" in get_spec(name).reward


@pytest.mark.parametrize("name", EVERY)
def test_a_threshold_follows_gymnasiums_for_the_same_configuration(name: str) -> None:
    diff = _differences(name)
    assert not diff.threshold_source.startswith("ours (gymnasium"), (name, diff.threshold_source)


def test_the_8x8_lake_is_gymnasiums_frozenlake8x8() -> None:
    spec = get_spec("FrozenLake-v1.8x8")
    assert gym_counterpart(spec) == "FrozenLake8x8-v1"
    assert spec.reward_threshold == gym.spec("FrozenLake8x8-v1").reward_threshold == 0.85
    assert "solved at 0.85" in spec.reward
    assert gym_counterpart(get_spec("FrozenLake-v1.deterministic")) is None


def test_envs_shows_kwargs_limits_and_threshold_sources(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["envs"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()

    def under(name: str) -> str:
        i = next(i for i, line in enumerate(lines) if line.split()[:1] == [name])
        return lines[i] + "\n" + lines[i + 1]

    assert "is_slippery=False (gymnasium: True)" in under("FrozenLake-v1.deterministic")
    assert "gymnasium FrozenLake-v1 (for its own kwargs)" in under("FrozenLake-v1.deterministic")
    assert "step limit 500 (gymnasium: none)" in under("CliffWalking-v1")
    assert "gymnasium FrozenLake8x8-v1" in under("FrozenLake-v1.8x8")
    assert "step limit 200 (gymnasium: 100)" in under("FrozenLake-v1.8x8")
    assert "not gymnasium's" not in under("FrozenLake-v1").splitlines()[1]
    assert main(["envs", "--json"]) == 0
    rows = {r["env_id"]: r for r in json.loads(capsys.readouterr().out)}
    lake = rows["FrozenLake-v1.deterministic"]["gymnasium"]
    assert lake["kwargs"] == {"is_slippery": {"spec": False, "gymnasium": True}}
    assert rows["CliffWalking-v1"]["gymnasium"]["step_limit"] == {"spec": 500, "gymnasium": None}
    assert rows["CartPole-v1"]["gymnasium"]["threshold_source"] == "gymnasium CartPole-v1"


def test_an_old_run_of_the_unslippery_lake_evaluates_resumes_and_reruns_on_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "logs" / "FrozenLake-v1" / "old"
    shutil.copytree(OLD_RUN, run)
    recorded = json.loads((run / "config.json").read_text(encoding="utf-8"))
    assert recorded["config"]["env_id"] == "FrozenLake-v1" and recorded["env_spec"]["kwargs"]["is_slippery"] is False
    # evaluate: the run's recorded spec, and a bare policy file's recorded kwargs
    for target in (run, run / "best_policy.json"):
        assert main(["evaluate", str(target), "--episodes", "3", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["env_id"] == "FrozenLake-v1"
    # resume: the recorded spec, its hints file's old text in the prompt
    assert main(["train", "--resume", str(run), "--iterations", "3", "--no-progress"]) == 0
    last = RunDir(run).load_transcripts()[-1]  # the package's reader: packed lines come back whole
    assert last["iteration"] == 3 and "The lake is not slippery" in last["messages"][-1]["content"]
    assert json.loads((run / "config.json").read_text(encoding="utf-8"))["env_spec"] == recorded["env_spec"]
    # re-run as an experiment (--config its config.json): the lake it ran on, said on stderr
    capsys.readouterr()
    assert main(["train", "--config", str(run / "config.json"), "--logs-dir", str(tmp_path / "logs"), "--run-id",
                 "again", "--iterations", "1", "--no-progress"]) == 0
    assert "that environment is FrozenLake-v1.deterministic today" in capsys.readouterr().err
    again = json.loads((tmp_path / "logs" / "FrozenLake-v1" / "again" / "config.json").read_text(encoding="utf-8"))
    assert again["config"]["env_id"] == "FrozenLake-v1.deterministic"
    assert again["env_spec"]["kwargs"] == recorded["env_spec"]["kwargs"]


def test_an_old_comparison_of_the_unslippery_lake_is_not_continued_on_the_slippery_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A comparison folder made when FrozenLake-v1 was not slippery: continuing it with `--env FrozenLake-v1` would add
    runs on another lake beside its own, so it is refused, naming the id that continues it; nothing is written."""
    out = tmp_path / "cmp"
    argv = ["compare", "--backends", "offline", "--iterations", "1", "--heldout-episodes", "3", "--out", str(out),
            "--no-progress"]
    assert main([*argv, "--env", "FrozenLake-v1.deterministic", "--seeds", "0"]) == 0
    for path in [out / "compare.json", *out.rglob("config.json")]:  # as that day's code wrote them
        path.write_text(path.read_text(encoding="utf-8").replace('"FrozenLake-v1.deterministic"', '"FrozenLake-v1"')
                        .replace('"variant": "deterministic"', '"variant": ""'), encoding="utf-8")
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    capsys.readouterr()
    assert main([*argv, "--env", "FrozenLake-v1", "--seeds", "0-1"]) == 2
    err = capsys.readouterr().err
    assert 'env kwargs {"is_slippery": false, "map_name": "4x4"}' in err
    assert "--env FrozenLake-v1.deterministic gives the run's" in err and len(err.strip().splitlines()) == 1
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before
