"""Hardening round 4 (issue 29), items 6 and 7: custom environments with non-finite outputs, ``Discrete(n, start=k)``
observations and step limits; task text that follows the keyword arguments actually used."""

from __future__ import annotations

import importlib
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from llm_policy_gen.cli import main
from llm_policy_gen.config import TrainConfig
from llm_policy_gen.envs.spec import EnvSpec
from llm_policy_gen.envs.text import describe_kwargs
from llm_policy_gen.errors import SpecError
from llm_policy_gen.prompting.builder import PromptBuilder
from llm_policy_gen.run.environment import resolve_spec

PROBE = '''
    import math

    import gymnasium as gym
    import numpy as np

    RESETS = [0]
    """Resets of every Probe so far (all instances)."""
    BAD_AFTER = [None]
    """With a number: every episode that starts after that many resets gives a NaN reward at its second step."""


    class Probe(gym.Env):
        """A line of cells; action 1 walks right. ``bad`` makes one output non-finite at step ``at``."""

        def __init__(self, bad="", at=2, start=0, box=False, never_ends=False):
            self.bad, self.at, self.box, self.never_ends = bad, at, box, never_ends
            if box:
                high = np.array([np.inf, 1.0]) if bad == "obs_sampled" else np.array([10.0, 1.0])
                self.observation_space = gym.spaces.Box(-high, high, dtype=np.float64)
            else:
                self.observation_space = gym.spaces.Discrete(6, start=start)
            self.start = start
            self.action_space = gym.spaces.Discrete(2)
            self.pos = self.t = 0
            self.armed = False

        def _obs(self):
            if self.box:
                nan = self.bad.startswith("obs") and self.t == self.at
                return np.array([math.nan if nan else float(self.pos), 0.5])
            return self.start + self.pos

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            RESETS[0] += 1
            self.armed = BAD_AFTER[0] is not None and RESETS[0] > BAD_AFTER[0]
            self.pos = self.t = 0
            return self._obs(), {}

        def step(self, action):
            self.t += 1
            self.pos = max(0, min(5, self.pos + (1 if int(action) == 1 else -1)))
            reward = float(self.pos == 5)
            if self.t == self.at and (self.armed or self.bad in ("nan", "inf")):
                reward = math.inf if self.bad == "inf" else math.nan
            done = self.pos == 5 and not self.never_ends
            return self._obs(), reward, done, False, {}


    gym.register("LPGProbe-v0", entry_point=Probe, max_episode_steps=40)
    gym.register("LPGEndless-v0", entry_point=Probe)
'''


@pytest.fixture
def probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    (tmp_path / "lpg_round4_probe.py").write_text(textwrap.dedent(PROBE))
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("lpg_round4_probe")
    module.RESETS[0], module.BAD_AFTER[0] = 0, None
    return module


def _train(tmp_path: Path, env: str, *extra: str) -> int:
    return main(["train", "--env", env, "--backend", "offline", "--iterations", "2", "--candidates", "1",
                 "--heldout-episodes", "3", "--logs-dir", str(tmp_path / "logs"), "--run-id", "r", "--no-plots",
                 "--no-progress", *extra])


def _one_line(err: str) -> str:
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _strict_json(text: str) -> Any:
    def refuse(name: str) -> Any:
        raise AssertionError(f"{name} in a JSON file")

    return json.loads(text, parse_constant=refuse)


# ------------------------------------------------------------------------------------------- item 6
@pytest.mark.parametrize(("bad", "shown"), [("nan", "non-finite reward (nan) at step 2"),
                                            ("inf", "non-finite reward (inf) at step 2")])
def test_a_non_finite_reward_at_the_start_is_refused_naming_step_and_episode(
        tmp_path: Path, probe: Any, capsys: pytest.CaptureFixture[str], bad: str, shown: str) -> None:
    code = _train(tmp_path, "lpg_round4_probe:LPGProbe-v0", "--env-kwargs", json.dumps({"bad": bad}))
    line = _one_line(capsys.readouterr().err)
    assert code == 2 and shown in line and "of the episode with seed" in line
    assert not (tmp_path / "logs").exists()


def test_a_non_finite_reward_during_a_run_ends_it_consistently_and_it_resumes(
        tmp_path: Path, probe: Any, capsys: pytest.CaptureFixture[str]) -> None:
    env = "lpg_round4_probe:LPGProbe-v0"
    assert _train(tmp_path / "healthy", env, "--iterations", "1") == 0
    first_iteration_resets = probe.RESETS[0]
    probe.RESETS[0], probe.BAD_AFTER[0] = 0, first_iteration_resets  # the second iteration's first episode is bad
    capsys.readouterr()
    code = _train(tmp_path, env, "--iterations", "3")
    err = capsys.readouterr().err
    line = err.strip().splitlines()[-1]  # after the backend's notice
    assert code == 1 and "Traceback" not in err and line.startswith("llm-policy-gen train: failed: ")
    assert "non-finite reward (nan) at step 2 of the episode with seed" in line
    run = tmp_path / "logs" / "lpg_round4_probe-LPGProbe-v0" / "r"
    for name in ("config.json", "summary.json", "best_policy.json"):
        _strict_json((run / name).read_text())
    events = [_strict_json(x) for x in (run / "events.jsonl").read_text().splitlines()]
    assert [e["iteration"] for e in events] == [1]
    probe.BAD_AFTER[0] = None  # the environment is fixed: the run goes on from its last finished iteration
    assert main(["train", "--resume", str(run), "--env", env, "--no-progress"]) == 0, capsys.readouterr().err
    assert [_strict_json(x)["iteration"] for x in (run / "events.jsonl").read_text().splitlines()] == [1, 2, 3]


def test_nan_in_a_box_observation_is_refused_without_advice_about_a_spec(
        tmp_path: Path, probe: Any, capsys: pytest.CaptureFixture[str]) -> None:
    for bad in ("obs_sampled", "obs"):  # infinite bounds (estimated from samples) and finite ones
        code = _train(tmp_path, "lpg_round4_probe:LPGProbe-v0", "--env-kwargs",
                      json.dumps({"bad": bad, "box": True, "at": 3}))
        line = _one_line(capsys.readouterr().err)
        assert code == 2 and "non-finite observation" in line and "at step 3" in line and "seed" in line, line
        assert "spec" not in line
        assert not (tmp_path / "logs").exists()


def test_discrete_observations_starting_at_k_train_and_evaluate(
        tmp_path: Path, probe: Any, capsys: pytest.CaptureFixture[str]) -> None:
    env = "lpg_round4_probe:LPGProbe-v0"
    assert _train(tmp_path, env, "--env-kwargs", '{"start": 3}') == 0, capsys.readouterr().err
    run = tmp_path / "logs" / "lpg_round4_probe-LPGProbe-v0" / "r"
    capsys.readouterr()
    assert main(["evaluate", str(run), "--json", "--env", env, "--episodes", "4"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["episodes"] == 4 and 0.0 <= result["mean"] <= 1.0


@pytest.mark.parametrize("steps", ["-1", "0", "2.5", "true", '"100"', "1000000000000"])
def test_a_step_limit_that_is_not_positive_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      steps: str) -> None:
    code = _train(tmp_path, "CartPole-v1", "--env-kwargs", f'{{"max_episode_steps": {steps}}}')
    line = _one_line(capsys.readouterr().err)
    assert code == 2 and "max_episode_steps" in line and "accepted an integer from 1 to 1,000,000" in line
    assert not (tmp_path / "logs").exists()


def test_a_never_ending_environment_is_cut_at_its_step_limit(tmp_path: Path, probe: Any,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    env = "lpg_round4_probe:LPGEndless-v0"  # registered without a limit, and it never terminates
    assert _train(tmp_path, env, "--env-kwargs", '{"never_ends": true, "max_episode_steps": 25}') == 0
    run = tmp_path / "logs" / "lpg_round4_probe-LPGEndless-v0" / "r"
    assert json.loads((run / "config.json").read_text())["env_spec"]["max_episode_steps"] == 25
    capsys.readouterr()
    assert main(["evaluate", str(run), "--json", "--env", env, "--episodes", "2"]) == 0
    assert json.loads(capsys.readouterr().out)["steps"] == 50


# ------------------------------------------------------------------------------------------- item 7
def _task_text(**env_kwargs: Any) -> str:
    spec = resolve_spec(TrainConfig(env_id="FrozenLake-v1.deterministic", env_kwargs=env_kwargs))
    fields = PromptBuilder().task_fields(spec, spec.action_discretizer())
    return "\n".join(str(fields[k]) for k in ("title", "description", "reward", "hints"))


def test_a_slippery_lake_is_described_as_slippery() -> None:
    text = _task_text(is_slippery=True)
    assert "exactly one cell" not in text and "not slippery" not in text
    assert "slippery: a move goes in the chosen direction with probability 0.333" in text
    assert "Holes at states 5, 7, 11 and 12" in text


def test_the_8x8_map_and_a_custom_map_are_described_from_the_environment() -> None:
    text = _task_text(map_name="8x8")
    assert "8x8" in text and "4x4" not in text and "state 15" not in text and "SFFF / FHFH" not in text
    assert "Holes at states 19, 29, 35, 41, 42, 46, 49, 52, 54 and 59" in text and "goal is state 63" in text
    assert "not slippery" in text
    text = _task_text(desc=["SFH", "FFG"], is_slippery=True)
    assert "2x3" in text and "Map rows: SFH / FFG" in text and "A hole at state 2" in text
    assert "goal is state 5 (row 1, col 2)" in text and "Holes at states 5, 7" not in text


def test_the_docs_8x8_config_file_gives_an_8x8_slippery_prompt(tmp_path: Path) -> None:
    (tmp_path / "exp.toml").write_text('env_id = "FrozenLake-v1"\nenv_kwargs = { map_name = "8x8" }\n')
    assert main(["train", "--config", str(tmp_path / "exp.toml"), "--backend", "offline", "--iterations", "1",
                 "--heldout-episodes", "2", "--logs-dir", str(tmp_path / "logs"), "--run-id", "r", "--no-plots",
                 "--no-progress"]) == 0
    spec = json.loads((tmp_path / "logs" / "FrozenLake-v1" / "r" / "config.json").read_text())["env_spec"]
    assert "The ice is slippery" in spec["hints_text"] and "not slippery" not in spec["description"]
    assert "8x8" in spec["description"] and "goal is state 63" in spec["hints_text"]
    again = EnvSpec.from_dict(spec)  # as --resume reads it back
    assert PromptBuilder().hints(again) == spec["hints_text"].strip()


def test_text_that_cannot_follow_the_kwargs_is_refused() -> None:
    spec = EnvSpec(env_id="CartPole-v1", description="a pole", kwargs={"sutton_barto_reward": False},
                   n_discrete_states=2, n_actions_discrete=2)
    changed = spec.with_overrides(kwargs={"sutton_barto_reward": True})
    with pytest.raises(SpecError, match="task text is written for sutton_barto_reward=False"):
        describe_kwargs(spec, changed)
    unchanged = spec.with_overrides(kwargs={"sutton_barto_reward": False, "other": 1})
    assert describe_kwargs(spec, unchanged) is unchanged  # kwargs the text never described leave it as it is
