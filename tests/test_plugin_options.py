"""Each plug-in declares its own options (issue 30 item 4): a pydantic model on the plug-in's class, shown by
``train --help`` in a section under the plug-in's name, given as flags, flat TOML keys and flat config.json keys,
read by the plug-in through a typed object; ``TrainConfig`` keeps only the shared settings. A config.json written
before the options moved (flat keys, ``tests/data/flat_keys_run``, made by the code of that day) still loads and
resumes. An option of a plug-in the run does not use is noted, not refused (docs/extending.md says why)."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llm_policy_gen.cli import main
from llm_policy_gen.config import TrainConfig, options
from llm_policy_gen.modes import MODES
from llm_policy_gen.modes.base import RunServices, Setup, Step
from llm_policy_gen.modes.reward import RewardOptions
from llm_policy_gen.modes.table import TableMode
from llm_policy_gen.registry import PluginOptions, setting
from llm_policy_gen.schema.aliases import SETTING_ALIASES

OLD_RUN = Path(__file__).parent / "data" / "flat_keys_run"


class DemoOptions(PluginOptions):
    """A foreign mode's options (test example)."""

    demo_level: int = setting(2, "an integer >= 1", "Demo mode: how many times it says hello.", ge=1)


class DemoMode(TableMode):
    """Table mode that reads its own option and writes it into every event."""

    name = "demo-opts"
    Options = DemoOptions

    def prepare(self, setup: Setup, resumed: bool) -> dict[str, Any]:
        self.options = setup.cfg.options_for(DemoOptions)
        return {**super().prepare(setup, resumed), "demo_level_seen": self.options.demo_level}

    def iterate(self, run: RunServices, iteration: int) -> Step:
        step = super().iterate(run, iteration)
        step.fields["demo_level"] = self.options.demo_level
        return step


@pytest.fixture
def demo_mode() -> Iterator[None]:
    MODES.register("demo-opts", f"{__name__}:DemoMode", description="table mode with an option (test example)")
    yield
    MODES.unregister("demo-opts")


def _train(tmp_path: Path, *extra: str) -> list[str]:
    return ["train", "--env", "FrozenLake-v1", "--backend", "offline", "--candidates", "2", "--heldout-episodes",
            "5", "--logs-dir", str(tmp_path / "logs"), "--no-plots", "--no-progress", *extra]


def _record(tmp_path: Path, run_id: str) -> dict[str, Any]:
    found = json.loads((tmp_path / "logs" / "FrozenLake-v1" / run_id / "config.json").read_text(encoding="utf-8"))
    assert isinstance(found, dict)
    return found


def _events(tmp_path: Path, run_id: str) -> list[dict[str, Any]]:
    text = (tmp_path / "logs" / "FrozenLake-v1" / run_id / "events.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines()]


def _help_sections(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> dict[str, list[str]]:
    """``train --help``'s flags, by the section that lists them ("" for the shared settings)."""
    monkeypatch.setenv("COLUMNS", "2000")
    assert main(["train", "--help"]) == 0
    sections: dict[str, list[str]] = {}
    current = ""
    for line in capsys.readouterr().out.splitlines():
        if line.endswith(":") and not line.startswith(" "):
            current = line[:-1].removeprefix("options of ") if line.startswith("options of ") else ""
        elif m := re.match(r"  (--[a-z-]+)", line):
            sections.setdefault(current, []).append(m.group(1))
    return sections


def test_a_foreign_plugins_option_is_shown_under_its_name(demo_mode: None, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    sections = _help_sections(monkeypatch, capsys)
    assert sections["mode demo-opts"] == ["--demo-level"]
    assert "--demo-level" not in sections[""]
    # the shipped plug-ins' options are under theirs, and the shared settings carry none of them
    assert sections["mode reward"] == ["--reward-potential-bound"]
    # one spelling of a Q-learner's step size and discount, under every mode that runs one (issue 60 item 4)
    assert sections["modes reward, advisor, q-learning"] == ["--q-alpha", "--q-gamma"]
    # q-learning is a mode only: its old spelling as a backend has no registry line of its own (issue 60 item 2)
    assert "--q-init" in sections["mode q-learning"] and not any("backend q-learning" in t for t in sections)
    assert {"--lm-learner", "--lm-device", "--lm-lora"} <= set(sections["mode lm-policy"])
    assert not any(f.startswith("--learner") for s in sections.values() for f in s)
    assert "--base-url" in sections["backends replay, gemini, openai, anthropic, ollama, llamacpp"]
    assert sections["backend llamacpp"] == ["--llamacpp-n-ctx", "--llamacpp-threads"]
    assert sections["answer format rules"] == ["--rules-refine"]
    assert "--candidates" in sections[""] and "--log" in sections[""] and "--reward-potential-bound" not in sections[""]


def test_a_foreign_option_round_trips_through_the_command_line_config_json_and_resume(
        demo_mode: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(_train(tmp_path, "--mode", "demo-opts", "--iterations", "1", "--run-id", "cli",
                       "--demo-level", "7")) == 0, capsys.readouterr().err
    record = _record(tmp_path, "cli")
    assert record["config"]["demo_level"] == 7 and "demo_level" in record["config"]["explicit"]
    assert [e["demo_level"] for e in _events(tmp_path, "cli")] == [7]  # the mode read it, typed
    run = tmp_path / "logs" / "FrozenLake-v1" / "cli"
    assert main(["train", "--resume", str(run), "--iterations", "2"]) == 0, capsys.readouterr().err
    assert [e["demo_level"] for e in _events(tmp_path, "cli")] == [7, 7]  # from config.json
    before = (run / "config.json").read_bytes()
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--iterations", "3", "--demo-level", "3"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--demo-level cannot change" in err, err
    assert (run / "config.json").read_bytes() == before


def test_a_foreign_option_round_trips_through_a_toml_file(demo_mode: None, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    toml = tmp_path / "demo.toml"
    toml.write_text('[train]\nmode = "demo-opts"\ndemo-level = 4\niterations = 1\nrun_id = "toml"\n', encoding="utf-8")
    assert main(_train(tmp_path, "--config", str(toml))) == 0, capsys.readouterr().err
    assert _record(tmp_path, "toml")["config"]["demo_level"] == 4
    assert [e["demo_level"] for e in _events(tmp_path, "toml")] == [4]
    toml.write_text('mode = "demo-opts"\ndemo_level = 0\n', encoding="utf-8")
    capsys.readouterr()
    assert main(_train(tmp_path, "--config", str(toml), "--run-id", "bad")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"config file {toml}: bad demo_level = 0: accepted an integer >= 1" in err, err
    assert main(_train(tmp_path, "--mode", "demo-opts", "--demo-level", "0", "--run-id", "bad")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bad --demo-level 0: accepted an integer >= 1" in err, err
    assert not (tmp_path / "logs" / "FrozenLake-v1" / "bad").exists()


def test_a_config_json_with_the_flat_keys_of_before_still_loads_and_resumes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = json.loads((OLD_RUN / "config.json").read_text(encoding="utf-8"))["config"]
    assert {"potential_bound", "temperature", "lm_epochs", "learner_alpha", "max_retries"} <= set(old)
    # re-run as an experiment: every key of the old file is read, the plug-ins' options among them
    assert main(["train", "--config", str(OLD_RUN / "config.json"), "--logs-dir", str(tmp_path / "logs"),
                 "--run-id", "again", "--iterations", "1"]) == 0, capsys.readouterr().err
    again = _record(tmp_path, "again")["config"]
    for key in ("potential_bound", "temperature", "lm_epochs", "max_retries", "candidates"):
        assert again[SETTING_ALIASES.get(key, key)] == old[key], key  # under its name of today
    # one spelling today: the reward and advisor modes' learner_alpha is q_alpha, which this table run never used
    assert old["learner_alpha"] == 0.3 and again["q_alpha"] is None and "learner_alpha" not in again
    assert (old["potential_bound"], old["temperature"], old["lm_epochs"]) == (50.0, 0.5, 3)
    # and the run directory that day's code wrote resumes
    run = tmp_path / "logs" / "FrozenLake-v1" / "flat_keys_run"
    shutil.copytree(OLD_RUN, run)
    assert main(["train", "--resume", str(run), "--iterations", "3"]) == 0, capsys.readouterr().err
    assert [e["iteration"] for e in _events(tmp_path, "flat_keys_run")] == [1, 2, 3]
    cfg = TrainConfig.build((old, "old config.json"))
    assert cfg.options_for(RewardOptions) == RewardOptions(reward_potential_bound=50.0)


def test_the_shared_configuration_keeps_at_most_40_settings() -> None:
    assert len(TrainConfig.model_fields) <= 40
    moved = {"reward_potential_bound", "advisor_prob", "advisor_decay", "q_alpha", "q_gamma", "rules_refine",
             "base_url", "timeout_s", "max_retries", "temperature", "llamacpp_n_ctx", "llamacpp_threads",
             "local_concurrency", "lm_model",
             "lm_epochs"}
    assert not moved & set(TrainConfig.model_fields)
    assert moved <= set(options())


def test_every_setting_has_a_flag(demo_mode: None) -> None:
    every = options()
    assert "demo_level" in every
    assert [n for n, o in every.items() if not o.flag] == ["explicit"]  # the run's own record of what was given
    flags = [o.flag for o in every.values() if o.flag]
    assert len(flags) == len(set(flags))


def test_the_help_lists_what_the_registries_hold(demo_mode: None) -> None:
    every = options()
    assert "demo-opts" in every["mode"].accepted and "lm-policy" in every["mode"].accepted
    assert "replay:PATH" in every["backend"].accepted and "llamacpp:PATH.gguf" in every["backend"].accepted
    assert "gemini[:MODEL]" in every["backend"].accepted and "kept-table-q" in every["backend"].accepted
    assert every["log"].accepted == "a list of: csv, tensorboard, wandb"


def test_an_option_of_a_plugin_not_in_use_is_noted_and_changes_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(_train(tmp_path, "--iterations", "1", "--run-id", "noted", "--reward-potential-bound", "5",
                       "--lm-epochs", "2")) == 0
    err = capsys.readouterr().err
    assert ("note: --reward-potential-bound has no effect on this run's mode table (it is an option of mode reward)"
            in err)
    assert "note: --lm-epochs has no effect on this run's mode table (it is an option of mode lm-policy)" in err
    assert _record(tmp_path, "noted")["config"]["reward_potential_bound"] == 5.0
    assert main(_train(tmp_path, "--iterations", "1", "--run-id", "quiet", "--mode", "reward",
                       "--reward-potential-bound", "5")) == 0
    assert "has no effect" not in capsys.readouterr().err


def test_a_key_declared_by_two_plugins_is_refused(demo_mode: None) -> None:
    class Clash(PluginOptions):
        reward_potential_bound: float = setting(1.0, "a number", "clash")

    class ClashMode(DemoMode):
        Options = Clash  # type: ignore[assignment]

    globals()["ClashMode"] = ClashMode
    MODES.register("clash", f"{__name__}:ClashMode")
    try:
        with pytest.raises(ValueError, match="'reward_potential_bound' of mode clash is declared already by mode "
                                             "reward"):
            options()
    finally:
        MODES.unregister("clash")
        del globals()["ClashMode"]
    assert "reward_potential_bound" in options()
