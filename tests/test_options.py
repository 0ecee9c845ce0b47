"""Options declared once (#17 item 2): every setting of ``TrainConfig`` carries its flag, help, default and whether it
may change on resume or between sweep runs; the ``train`` command line is generated from the fields. Every setting
round-trips through the command line (where it is a flag), a TOML file and a run's ``config.json``; the contract's
flags still parse; ``--help`` shows the fields' own defaults."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from llm_policy_gen import config
from llm_policy_gen.cli import main
from llm_policy_gen.config import options
from llm_policy_gen.sweep import plan

OPTIONS = options()

ROOT = Path(__file__).resolve().parents[1]

#: Today's ``train`` flags that are settings, each with its setting: the spellings users and scripts rely on.
FLAGS = {
    "--env": "env_id", "--backend": "backend", "--mode": "mode", "--iterations": "iterations",
    "--max-episodes": "max_episodes", "--max-steps": "max_steps", "--candidates": "candidates", "--seed": "seed",
    "--logs-dir": "logs_dir",
    "--run-id": "run_id", "--train-episodes": "train_episodes",
    "--reward-potential-bound": "reward_potential_bound", "--advisor-prob": "advisor_prob",
    "--advisor-decay": "advisor_decay", "--test-start": "test_start", "--test-max": "test_max",
    "--test-rise-every": "test_rise_every", "--test-seeds": "test_seeds", "--confirm-episodes": "confirm_episodes",
    "--confirm-batches": "confirm_batches", "--confirm-z": "confirm_z", "--heldout-episodes": "heldout_episodes",
    "--patience": "patience", "--max-prompt-tokens": "max_prompt_tokens", "--output-format": "output_format",
    "--repair-attempts": "repair_attempts", "--base-url": "base_url", "--timeout": "timeout_s",
    "--max-retries": "max_retries", "--temperature": "temperature", "--max-output-tokens": "max_output_tokens",
    "--llamacpp-n-ctx": "llamacpp_n_ctx", "--llamacpp-threads": "llamacpp_threads", "--budget-usd": "budget_usd",
    "--max-concurrent-calls": "max_concurrent_calls", "--local-concurrency": "local_concurrency",
    "--unreachable-after": "unreachable_after", "--no-cache": "cache", "--prices": "prices_file", "--bins": "bins",
    "--dims": "dims", "--env-kwargs": "env_kwargs", "--prior": "prior", "--no-plots": "plots",
    "--no-progress": "progress",
    "--quiet": "quiet", "--log": "log", "--evidence": "evidence", "--rules-refine": "rules_refine",
    "--lm-model": "lm_model", "--lm-features": "lm_features", "--lm-state-text": "lm_state_text",
    "--lm-pooling": "lm_pooling", "--lm-learner": "lm_learner",
    "--lm-device": "lm_device", "--lm-n-steps": "lm_n_steps", "--lm-batch-size": "lm_batch_size",
    "--lm-epochs": "lm_epochs", "--lm-learning-rate": "lm_learning_rate", "--lm-gamma": "lm_gamma",
    "--lm-ent-coef": "lm_ent_coef", "--lm-net-arch": "lm_net_arch", "--lm-cache": "lm_cache",
    "--lm-head": "lm_head", "--lm-score-norm": "lm_score_norm", "--lm-lora": "lm_lora",
    "--peer-algo": "peer_algo",
    # the twelve settings that were given only in a file until issue 30 item 4
    "--explore-epsilon": "explore_epsilon", "--best-k": "best_k", "--worst-k": "worst_k",
    "--memory-capacity": "memory_capacity", "--evidence-gamma": "evidence_gamma",
    "--max-prompt-chars": "max_prompt_chars",
    "--max-answer-chars": "max_answer_chars", "--cache-dir": "cache_dir", "--binning": "binning",
    # the q-learning mode's options (its settings were fixed in the code before)
    "--q-alpha": "q_alpha", "--q-gamma": "q_gamma", "--q-epsilon-start": "q_epsilon_start",
    "--q-epsilon-end": "q_epsilon_end", "--q-epsilon-episodes": "q_epsilon_episodes", "--q-init": "q_init",
    # issue 62: the selection rule, the q-learner's episodes, the peer's evaluation callback
    "--select": "select", "--q-learns-from": "q_learns_from", "--peer-select": "peer_select",
    "--peer-eval-episodes": "peer_eval_episodes", "--peer-actions": "peer_actions",
}
#: Settings given only in a file (the run's own record of what the user gave).
FILE_ONLY = {"explicit"}
#: Settings the tiny offline run below refuses to take (``--rules-refine`` needs rules from an LLM):
#: tests/test_refine.py round-trips them on a replayed run.
NEEDS_LLM = {"rules_refine"}


def values(tmp_path: Path) -> dict[str, Any]:
    """A value for every setting but ``explicit``, none of them its default, that a tiny offline run accepts."""
    prices = tmp_path / "prices.toml"
    shutil.copy(ROOT / "llm_policy_gen" / "data" / "prices.toml", prices)
    return {
        "env_id": "MountainCar-v0", "backend": "offline", "mode": "advisor", "iterations": 2, "max_episodes": 900,
        "max_steps": 100000,
        "candidates": 2, "seed": 7, "logs_dir": str(tmp_path / "logs"), "run_id": "every", "train_episodes": 1,
        "explore_epsilon": 0.2, "reward_potential_bound": 50.0,
        "advisor_prob": 0.25, "advisor_decay": 0.8, "test_start": 2, "test_max": 4, "test_seeds": "fresh",
        "test_rise_every": 2, "confirm_episodes": 2, "confirm_batches": 2, "confirm_z": 1.5, "heldout_episodes": 3,
        "patience": 5, "best_k": 3, "worst_k": 2, "memory_capacity": 50, "evidence_gamma": 0.9,
        "max_prompt_chars": 8000,
        "max_prompt_tokens": 4000, "output_format": "table", "repair_attempts": 1,
        "base_url": "http://127.0.0.1:9/v1", "timeout_s": 30.5, "max_retries": 1, "temperature": 0.5,
        "max_output_tokens": 2000, "max_answer_chars": 100000, "llamacpp_n_ctx": 2048, "llamacpp_threads": 2,
        "budget_usd": 1.5,
        "max_concurrent_calls": 3, "local_concurrency": 2, "unreachable_after": 5, "cache": False,
        "cache_dir": str(tmp_path / "cache"), "prices_file": str(prices), "bins": [5, 6], "dims": [0, 1],
        "env_kwargs": {"goal_velocity": 0.01}, "binning": "seed", "prior": "neutral", "plots": False, "progress": False,
        "quiet": True, "log": ["csv"], "evidence": "both",
        # lm-policy settings: the advisor run below ignores them, config.json records them
        "lm_model": str(tmp_path / "model.gguf"), "lm_features": "random", "lm_state_text": "meaning",
        "lm_pooling": "last", "lm_learner": "trpo",
        "lm_device": "cuda", "lm_n_steps": 128, "lm_batch_size": 32, "lm_epochs": 3, "lm_learning_rate": 0.001,
        "lm_gamma": 0.9, "lm_ent_coef": 0.01, "lm_net_arch": [32], "lm_cache": str(tmp_path / "lm"),
        "lm_head": "scores", "lm_score_norm": "token", "lm_lora": 2, "peer_algo": "trpo",
        "q_alpha": 0.4, "q_gamma": 0.9, "q_epsilon_start": 0.3, "q_epsilon_end": 0.01, "q_epsilon_episodes": 50,
        "q_init": 1.0, "q_learns_from": "own", "select": "keeper", "peer_select": "eval", "peer_eval_episodes": 3,
        "peer_actions": "spec",
    }


def command_line(given: dict[str, Any]) -> list[str]:
    """``train`` arguments for the settings that are flags, spelled as a user types them."""
    args: list[str] = []
    for flag, name in FLAGS.items():
        if name in NEEDS_LLM:
            continue
        value = given[name]
        if isinstance(value, bool):
            args.append(flag)
        elif isinstance(value, list):
            args += [flag, ",".join(str(x) for x in value)]
        elif isinstance(value, dict):
            args += [flag, json.dumps(value)]
        else:
            args += [flag, str(value)]
    return args


def toml_text(given: dict[str, Any]) -> str:
    def literal(v: Any) -> str:
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{k} = {literal(x)}" for k, x in v.items()) + " }"
        if isinstance(v, list):
            return "[" + ", ".join(literal(x) for x in v) + "]"
        return json.dumps(v)  # strings, numbers and booleans are written alike in TOML and JSON

    return "[train]\n" + "".join(f"{k.replace('_', '-')} = {literal(v)}\n" for k, v in given.items())


def recorded(logs: Path, env_id: str, run_id: str) -> dict[str, Any]:
    settings = json.loads((logs / env_id / run_id / "config.json").read_text(encoding="utf-8"))["config"]
    assert isinstance(settings, dict)
    return settings


def test_the_values_cover_every_setting_and_none_is_its_default(tmp_path: Path) -> None:
    given = values(tmp_path)
    assert set(given) | {"explicit"} | NEEDS_LLM == set(OPTIONS)
    same = [k for k, v in given.items() if v == OPTIONS[k].default]
    assert not same, same


def test_every_flag_reaches_its_setting_in_config_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    given = values(tmp_path)
    assert main(["train", *command_line(given)]) == 0, capsys.readouterr().err
    settings = recorded(tmp_path / "logs", "MountainCar-v0", "every")
    for name in set(FLAGS.values()) - NEEDS_LLM:
        assert settings[name] == given[name], name
    assert settings["explicit"] == sorted(set(FLAGS.values()) - NEEDS_LLM)


def test_every_setting_round_trips_through_a_toml_file_and_config_json(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    given = values(tmp_path)
    toml = tmp_path / "every.toml"
    toml.write_text(toml_text(given), encoding="utf-8")
    assert main(["train", "--config", str(toml)]) == 0, capsys.readouterr().err
    first = recorded(tmp_path / "logs", "MountainCar-v0", "every")
    assert first == {**given, "explicit": sorted(given), **{k: OPTIONS[k].default for k in NEEDS_LLM}}
    # the run's config.json re-runs the same experiment: every setting but the run's own id comes back the same
    again = tmp_path / "logs" / "MountainCar-v0" / "every" / "config.json"
    assert main(["train", "--config", str(again), "--run-id", "again"]) == 0, capsys.readouterr().err
    second = recorded(tmp_path / "logs", "MountainCar-v0", "again")
    assert second == {**first, "run_id": "again", "explicit": sorted(set(first["explicit"]) | NEEDS_LLM)}


def test_the_contract_flags_still_parse(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """../shared/CONTRACT.md's train line, spelled literally, with --timeout, --prices and --no-cache."""
    prices = tmp_path / "prices.toml"
    shutil.copy(ROOT / "llm_policy_gen" / "data" / "prices.toml", prices)
    file = tmp_path / "c.toml"
    file.write_text('heldout_episodes = 5\nrun_id = "contract"\nplots = false\nprogress = false\n', encoding="utf-8")
    logs = tmp_path / "logs"
    assert main(["train", "--env", "FrozenLake-v1", "--backend", "offline", "--mode", "table", "--candidates", "2",
                 "--iterations", "2", "--max-episodes", "1000", "--seed", "3", "--logs-dir", str(logs), "--config",
                 str(file), "--log", "tensorboard,csv", "--timeout", "9", "--prices", str(prices),
                 "--no-cache"]) == 0, capsys.readouterr().err
    s = recorded(logs, "FrozenLake-v1", "contract")
    assert (s["env_id"], s["backend"], s["mode"], s["candidates"], s["iterations"], s["max_episodes"], s["seed"],
            s["logs_dir"]) == ("FrozenLake-v1", "offline", "table", 2, 2, 1000, 3, str(logs))
    assert (s["log"], s["timeout_s"], s["prices_file"], s["cache"]) == (["tensorboard", "csv"], 9.0, str(prices), False)
    assert (s["heldout_episodes"], s["plots"], s["progress"]) == (5, False, False)  # from the file
    run = logs / "FrozenLake-v1" / "contract"
    assert (run / "progress.csv").is_file()
    # --resume RUN_DIR takes the settings that may change on resume, spelled as flags (and the run's price file)
    assert main(["train", "--resume", str(run), "--iterations", "3", "--timeout", "5", "--no-cache", "--quiet",
                 "--no-plots", "--no-progress", "--max-concurrent-calls", "2", "--prices", str(prices)]) == 0, \
        capsys.readouterr().err
    assert "3 iterations" in capsys.readouterr().out


def test_the_train_flags_are_todays_and_file_only_settings_have_none(capsys: pytest.CaptureFixture[str]) -> None:
    assert {o.flag: n for n, o in OPTIONS.items() if o.flag} == FLAGS
    assert {n for n, o in OPTIONS.items() if not o.flag} == FILE_ONLY
    assert main(["train", "--explicit", "x"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unrecognized arguments: --explicit" in err, err


def test_the_lists_read_from_the_fields_are_todays() -> None:
    assert config.option_names() == {
        "env_id": "--env", "timeout_s": "--timeout", "prices_file": "--prices", "cache": "--no-cache",
        "plots": "--no-plots", "progress": "--no-progress"}
    assert set(config.resume_options()) == {"iterations", "max_episodes", "max_steps", "progress", "quiet", "plots",
                                          "patience", "budget_usd", "timeout_s", "max_retries", "max_concurrent_calls",
                                          "cache", "llamacpp_threads", "local_concurrency", "lm_model"}
    assert set(plan.operational_settings()) == {
        "logs_dir", "run_id", "explicit", "progress", "quiet", "plots", "log", "timeout_s", "max_retries",
        "max_concurrent_calls", "unreachable_after", "cache", "cache_dir", "llamacpp_threads", "local_concurrency",
        "lm_cache"}
    assert config.resume_options()[0] == "iterations"  # the refusal's list starts with the most common one


def help_by_flag(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> dict[str, str]:
    monkeypatch.setenv("COLUMNS", "2000")  # one line per option: nothing wrapped
    assert main(["train", "--help"]) == 0
    found: dict[str, str] = {}
    flag = ""
    for line in capsys.readouterr().out.splitlines():
        if m := re.match(r"  (--[a-z-]+)(?: \S+)?(?:\s{2,}(.*))?$", line):  # the help starts here or below
            flag, found[m.group(1)] = m.group(1), m.group(2) or ""
        elif flag and line.startswith("    "):
            found[flag] = (found[flag] + " " + line.strip()).strip()
        else:
            flag = ""
    return found


def test_help_shows_each_fields_own_default(monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    helps = help_by_flag(monkeypatch, capsys)
    assert set(FLAGS) <= set(helps), set(FLAGS) - set(helps)
    for flag, name in FLAGS.items():
        option = OPTIONS[name]
        default, text = option.default, helps[flag]
        assert " ".join(option.description.split()) in text, flag
        if isinstance(default, bool):
            assert ("(on by default)" if default else "(off by default)") in text, flag
        elif isinstance(default, int | float | str):
            assert f"Default: {default}." in text, flag
    assert "Default: 4." in helps["--candidates"] and "Default: 8." in helps["--max-concurrent-calls"]
    assert "Default: CartPole-v1." in helps["--env"] and "Default: 16384." in helps["--max-output-tokens"]
    assert "on by default" in helps["--no-cache"] and "off by default" in helps["--quiet"]
    assert "120 s" in helps["--timeout"]  # a None default: the description says what it means


@pytest.mark.parametrize(("args", "expected"), [
    (["--candidates", "65"], "bad --candidates 65: accepted an integer in 1..64"),
    (["--test-seeds", "stale"], "argument --test-seeds: invalid choice: 'stale'"),
    (["--bins", "3,a"], "argument --bins: expected comma-separated integers, got '3,a'"),
    (["--env-kwargs", "[1]"], "argument --env-kwargs: expected a JSON object, got '[1]'"),
    (["--dims", "0,x"], "argument --dims: expected comma-separated integers, got '0,x'"),
])
def test_a_bad_flag_value_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 args: list[str], expected: str) -> None:
    assert main(["train", "--backend", "offline", "--logs-dir", str(tmp_path), *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and expected in err, err
    assert not any(tmp_path.iterdir())  # refused before a run directory exists
