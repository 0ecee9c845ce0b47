"""One name per idea (issue 60 item 4): a plug-in's flags carry its name (``--lm-learner``, ``--q-alpha``), one
spelling per setting in flags, TOML and ``config.json``; the old spellings still work with a one-line deprecation
note, and old files and records are read under today's names."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from llm_policy_gen.cli import main
from llm_policy_gen.config import TrainConfig, options
from llm_policy_gen.errors import UserError
from llm_policy_gen.modes.learner import LearnerOptions
from llm_policy_gen.modes.qlearning import QLearningOptions
from llm_policy_gen.schema.aliases import OLD_FLAGS, settings_in

#: The prefix of each plug-in's own flags: its name (``lm`` for lm-policy, ``q`` for every Q-learning mode).
PREFIXES = {"mode lm-policy": "--lm-", "mode peer": "--peer-", "mode q-learning": "--q-",
            "modes reward, advisor, q-learning": "--q-"}


def _run(tmp_path: Path, *args: str) -> int:
    return main(["train", "--env", "FrozenLake-v1.deterministic", "--backend", "offline", "--iterations", "1",
                 "--heldout-episodes", "5", "--logs-dir", str(tmp_path / "logs"), "--run-id", "r", "--no-plots",
                 "--no-progress", *args])


def _config(tmp_path: Path) -> dict[str, Any]:
    record = json.loads((tmp_path / "logs" / "FrozenLake-v1" / "r" / "config.json").read_text(encoding="utf-8"))
    assert isinstance(record, dict)
    return record


def test_train_help_shows_each_plugins_options_under_its_name_with_its_prefix(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("COLUMNS", "2000")
    assert main(["train", "--help"]) == 0
    sections: dict[str, list[str]] = {"": []}
    title = ""
    for line in capsys.readouterr().out.splitlines():
        if line.startswith("options of "):
            title = line.removeprefix("options of ").rstrip(":")
            sections[title] = []
        elif m := re.match(r"  (--[a-z-]+)", line):
            sections[title].append(m.group(1))
    for title, prefix in PREFIXES.items():
        assert sections[title] and all(f.startswith(prefix) for f in sections[title]), (title, sections[title])
    assert {"--lm-learner", "--lm-device", "--lm-lora"} <= set(sections["mode lm-policy"])
    listed = {f for flags in sections.values() for f in flags}
    assert not set(OLD_FLAGS) & listed  # an old spelling works but is not listed
    assert "--evidence-gamma" in sections[""] and not [f for f in listed if f.startswith("--learner")]
    # one spelling per setting: a setting's flag is its key with dashes, but for the few named otherwise
    odd = {n: o.flag for n, o in options().items() if o.flag and o.flag != "--" + n.replace("_", "-")}
    assert odd == {"env_id": "--env", "timeout_s": "--timeout", "prices_file": "--prices", "cache": "--no-cache",
                   "plots": "--no-plots", "progress": "--no-progress"}


def test_an_old_flag_still_works_and_says_so_in_one_line(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(tmp_path, "--mode", "reward", "--learner-alpha", "0.3", "--learner-gamma", "0.9",
                "--lora", "0") == 0
    err = capsys.readouterr().err
    notes = [line for line in err.splitlines() if "old spelling" in line]
    assert notes == ["note: --learner-alpha is the old spelling of --q-alpha (deprecated; it still works)",
                     "note: --learner-gamma is the old spelling of --q-gamma (deprecated; it still works)",
                     "note: --lora is the old spelling of --lm-lora (deprecated; it still works)"], err
    record = _config(tmp_path)
    c = record["config"]
    assert (c["q_alpha"], c["q_gamma"], c["lm_lora"]) == (0.3, 0.9, 0)
    assert not {"learner_alpha", "learner_gamma", "gamma"} & set(c) and c["evidence_gamma"] == 0.98
    assert (record["learner"]["alpha"], record["learner"]["gamma"]) == (0.3, 0.9)


def test_a_refused_command_with_an_old_flag_prints_its_one_line(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(tmp_path, "--mode", "reward", "--learner-gamma", "1") == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [err] and "bad --q-gamma 1.0: accepted a number in [0, 1)" in err, err
    assert not (tmp_path / "logs").exists()


def test_a_toml_file_with_old_keys_still_works_and_says_so(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    toml = tmp_path / "old.toml"
    toml.write_text("[train]\nmode = \"advisor\"\nlearner_alpha = 0.4\ngamma = 0.9\n", encoding="utf-8")
    assert _run(tmp_path, "--config", str(toml)) == 0
    err = capsys.readouterr().err
    assert f"note: config file {toml}: learner_alpha is the old name of q_alpha (deprecated; it still works)" in err
    assert f"note: config file {toml}: gamma is the old name of evidence_gamma (deprecated; it still works)" in err
    c = _config(tmp_path)["config"]
    assert (c["q_alpha"], c["evidence_gamma"], c["mode"]) == (0.4, 0.9, "advisor")
    assert {"q_alpha", "evidence_gamma"} <= set(c["explicit"])
    toml.write_text("learner_alpha = 0.4\nq_alpha = 0.3\n", encoding="utf-8")  # both names, two values
    assert _run(tmp_path, "--config", str(toml), "--run-id", "both") == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [err] and "learner_alpha is the old name of q_alpha; give one of them" in err, err


@pytest.mark.parametrize(("record", "q_alpha", "q_gamma"), [
    # config.json of before: every plug-in's options recorded, each mode reading its own
    ({"mode": "reward", "learner_alpha": 0.2, "learner_gamma": 0.99, "q_alpha": 0.5, "q_gamma": 0.99}, None, 0.99),
    ({"mode": "advisor", "learner_alpha": 0.3, "learner_gamma": 0.9, "q_alpha": 0.5, "q_gamma": 0.99,
      "explicit": ["learner_alpha", "learner_gamma", "mode"]}, 0.3, 0.9),
    ({"mode": "q-learning", "learner_alpha": 0.2, "learner_gamma": 0.99, "q_alpha": 0.5, "q_gamma": 0.95}, None, 0.95),
    ({"mode": "q-learning", "learner_alpha": 0.2, "q_alpha": 0.7, "explicit": ["q_alpha"]}, 0.7, None),
    ({"mode": "reward", "learner_alpha": 0.25}, 0.25, None),  # a user's file: what it gives is what it meant
    ({"mode": "table", "learner_alpha": 0.3, "learner_gamma": 0.9, "q_alpha": 0.5, "q_gamma": 0.99}, None, 0.99),
])
def test_old_records_are_read_under_todays_names_with_the_values_each_mode_used(
        record: dict[str, Any], q_alpha: float | None, q_gamma: float | None) -> None:
    today = settings_in(record, "config.json")
    assert not {"learner_alpha", "learner_gamma"} & set(today)
    assert (today.get("q_alpha"), today.get("q_gamma")) == (q_alpha, q_gamma)
    cfg = TrainConfig.build((today, "config.json"))
    used = {"reward": LearnerOptions, "advisor": LearnerOptions, "q-learning": QLearningOptions}.get(record["mode"])
    if used is not None:  # the step size the old run's mode used, read through today's one setting
        was = record["learner_alpha"] if used is LearnerOptions else record["q_alpha"]
        assert cfg.options_for(used).q_alpha == was


def test_both_names_with_two_values_are_refused_where_no_mode_decides() -> None:
    with pytest.raises(UserError, match="learner_gamma is the old name of q_gamma; give one of them"):
        settings_in({"learner_gamma": 0.9, "q_gamma": 0.95}, "x.toml")
    assert settings_in({"gamma": 0.9, "explicit": ["gamma"]}, "x.toml") == {"evidence_gamma": 0.9,
                                                                             "explicit": ["evidence_gamma"]}
