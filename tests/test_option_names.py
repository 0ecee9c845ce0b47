"""One name per idea (issue 60 item 4): a plug-in's flags carry its name (``--lm-learner``, ``--q-alpha``), one
spelling per setting in flags, TOML and ``config.json``; the old spellings still work with a one-line deprecation
note, and old files and records are read under today's names."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from llm_policy_gen.cli import main
from llm_policy_gen.config import TrainConfig, options
from llm_policy_gen.errors import UserError
from llm_policy_gen.modes.learner import LearnerOptions
from llm_policy_gen.modes.qlearning import QLearningOptions
from llm_policy_gen.schema.aliases import OLD_FLAGS, PREFIXED, settings_in
from llm_policy_gen.sweep.methods import parse_method

#: The prefix of each plug-in's own flags: its name (``lm`` for lm-policy, ``q`` for every Q-learning mode).
PREFIXES = {"mode lm-policy": "--lm-", "mode peer": "--peer-", "mode q-learning": "--q-",
            "modes reward, advisor, q-learning": "--q-", "mode reward": "--reward-", "mode advisor": "--advisor-",
            "backend llamacpp": "--llamacpp-", "answer format rules": "--rules-"}


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


# ------------------------------------------------------------------------- the plug-ins' options named for their owner
#: Each renamed flag, a value it takes on the tiny offline run, and the value config.json records.
RENAMED = [("--potential-bound", "7", "reward_potential_bound", 7.0), ("--advice-prob", "0.3", "advisor_prob", 0.3),
           ("--advice-decay", "0.8", "advisor_decay", 0.8), ("--n-ctx", "512", "llamacpp_n_ctx", 512),
           ("--llm-threads", "2", "llamacpp_threads", 2), ("--refine", "0", "rules_refine", 0)]


def test_every_plugin_option_carries_its_owners_name() -> None:
    assert {o.section for k, o in options().items() if k in PREFIXED.values()} == \
        {"mode reward", "mode advisor", "backend llamacpp", "answer format rules"}
    assert not set(PREFIXED) & set(options())  # one spelling: the old names are no setting of their own
    assert {f"--{old.replace('_', '-')}" for old in PREFIXED} <= set(OLD_FLAGS)


@pytest.mark.parametrize(("flag", "value", "key", "recorded"), RENAMED, ids=[r[0] for r in RENAMED])
def test_a_renamed_flag_still_works_and_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str,
                                               value: str, key: str, recorded: Any) -> None:
    assert _run(tmp_path, "--mode", "advisor", flag, value) == 0
    new = options()[key].flag
    notes = [line for line in capsys.readouterr().err.splitlines() if "old spelling" in line]
    assert notes == [f"note: {flag} is the old spelling of {new} (deprecated; it still works)"]
    c = _config(tmp_path)["config"]
    assert c[key] == recorded and not set(PREFIXED) & set(c) and key in c["explicit"]


def test_a_toml_file_with_the_old_names_of_plugin_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    toml = tmp_path / "old.toml"
    toml.write_text("[train]\nmode = \"advisor\"\nadvice-prob = 0.3\npotential_bound = 7.0\n", encoding="utf-8")
    assert _run(tmp_path, "--config", str(toml)) == 0
    err = capsys.readouterr().err
    assert f"note: config file {toml}: advice_prob is the old name of advisor_prob (deprecated; it still works)" in err
    c = _config(tmp_path)["config"]
    assert (c["advisor_prob"], c["reward_potential_bound"]) == (0.3, 7.0)


def test_an_old_run_resumes_with_the_options_it_recorded_under_their_old_names(tmp_path: Path) -> None:
    run = tmp_path / "logs" / "FrozenLake-v1" / "advisor"
    shutil.copytree(Path(__file__).parent / "data" / "rundirs_v1" / "logs" / "FrozenLake-v1" / "advisor", run)
    record = json.loads((run / "config.json").read_text(encoding="utf-8"))
    assert (record["config"]["advice_prob"], record["config"]["advice_decay"]) == (0.5, 0.9)  # the old keys
    assert main(["train", "--resume", str(run), "--iterations", "3", "--no-progress", "--quiet"]) == 0
    events = [json.loads(line) for line in (run / "events.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [e["advice_prob"] for e in events] == pytest.approx([0.5, 0.45, 0.405])  # 0.5 * 0.9^(t-1), as recorded
    today = settings_in({**record["config"], "advice_prob": 0.8}, "config.json")
    assert today["advisor_prob"] == 0.8 and "advice_prob" not in today


def test_a_method_entry_keeps_its_run_id_under_an_options_old_name() -> None:
    before = hashlib.sha256(json.dumps({"advice_prob": 0.25}).encode("utf-8")).hexdigest()[:8]
    old, new = parse_method("offline@advisor[advice_prob=0.25]"), parse_method("offline@advisor[advisor-prob=0.25]")
    assert old.options == new.options == {"advisor_prob": 0.25}
    assert old.run_id(0) == new.run_id(0) == f"offline-advisor-{before}_s0"  # the id the grammar gave it
