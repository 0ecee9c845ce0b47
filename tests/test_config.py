"""The run configuration: one pydantic model filled from defaults, a TOML file or a run's config.json, and the command
line. Every bad value is a one-line UserError naming the key, the value and what is accepted (exit code 2)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llm_policy_gen.cli import main
from llm_policy_gen.config import SEED_MAX, TrainConfig
from llm_policy_gen.envs import get_spec
from llm_policy_gen.errors import UserError
from llm_policy_gen.run import train
from llm_policy_gen.storage.config_files import load_config_file


def refused(values: dict[str, Any], source: str = "config file c.toml") -> str:
    with pytest.raises(UserError) as info:
        TrainConfig.build((values, source))
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith(f"{source}: "), msg
    return msg


@pytest.mark.parametrize(
    ("values", "key", "shown", "accepted"),
    [
        ({"iterations": "three"}, "iterations", '"three"', "an integer >= 0"),
        ({"iterations": 2.5}, "iterations", "2.5", "an integer >= 0"),
        ({"iterations": True}, "iterations", "true", "an integer >= 0"),
        ({"seed": "x"}, "seed", '"x"', f"an integer in 0..{SEED_MAX}"),
        ({"seed": 2**32}, "seed", str(2**32), f"an integer in 0..{SEED_MAX}"),
        ({"seed": -1}, "seed", "-1", f"an integer in 0..{SEED_MAX}"),
        ({"seed": 3.0}, "seed", "3.0", f"an integer in 0..{SEED_MAX}"),
        ({"evidence_gamma": "high"}, "evidence_gamma", '"high"', "a number in (0, 1)"),
        ({"evidence_gamma": 1}, "evidence_gamma", "1", "a number in (0, 1)"),
        ({"env_kwargs": 3}, "env_kwargs", "3", "a table of gymnasium.make keyword arguments"),
        ({"run_id": "../../x"}, "run_id", '"../../x"', "a non-empty name without path separators"),
        ({"run_id": "/abs"}, "run_id", '"/abs"', "a non-empty name without path separators"),
        ({"run_id": ""}, "run_id", '""', "a non-empty name without path separators"),
        ({"run_id": ".."}, "run_id", '".."', "a non-empty name without path separators"),
        ({"patience": -1}, "patience", "-1", "an integer >= 0"),
        ({"timeout_s": 0}, "timeout_s", "0", "a number of seconds > 0"),
        ({"max_retries": -1}, "max_retries", "-1", "an integer >= 0"),
        ({"train_episodes": 0}, "train_episodes", "0", "an integer >= 1"),
        ({"candidates": 65}, "candidates", "65", "an integer in 1..64"),
        ({"binning": "quantile"}, "binning", '"quantile"', "uniform or seed"),
        ({"bins": [3, "a"]}, "bins", "[3, 'a']", "a list of integers >= 1"),
        ({"log": "csv"}, "log", '"csv"', "a list of: csv, tensorboard"),
        ({"env_id": ""}, "env_id", '""', "a gymnasium id"),
    ],
)
def test_bad_values_name_key_value_and_what_is_accepted(values: dict[str, Any], key: str, shown: str,
                                                        accepted: str) -> None:
    msg = refused(values)
    assert f"bad {key} = {shown}: accepted {accepted}" in msg, msg


@pytest.mark.parametrize(("values", "message"), [
    ({"iterations": "three"}, 'bad --iterations "three": accepted an integer >= 0'),
    ({"env_id": ""}, 'bad --env "": accepted a gymnasium id'),
    ({"timeout_s": 0}, "bad --timeout 0: accepted a number of seconds > 0"),
    ({"run_id": "a/b"}, 'bad --run-id "a/b": accepted a non-empty name without path separators'),
    ({"env_kwargs": [1]}, "bad --env-kwargs [1]: accepted a table of gymnasium.make keyword arguments"),
])
def test_command_line_values_are_named_by_their_option(values: dict[str, Any], message: str) -> None:
    with pytest.raises(UserError) as info:
        TrainConfig.build((values, "command line"))
    assert str(info.value).startswith(message), str(info.value)


def test_unknown_key_is_named_with_the_accepted_ones() -> None:
    msg = refused({"iteratons": 3})
    assert "unknown setting 'iteratons'" in msg and "accepted: env_id, backend" in msg and "iterations" in msg
    assert "explicit" not in msg.split("accepted:")[1]


def test_test_max_below_test_start_names_both() -> None:
    msg = refused({"test_start": 5, "test_max": 2})
    assert "test_max 2" in msg and "test_start 5" in msg
    msg = refused({"test_max": 2})  # against the default test_start 3
    assert "test_max 2" in msg and "test_start 3" in msg


def test_test_max_below_test_start_says_what_is_accepted() -> None:
    assert "accepted" in refused({"test_start": 5, "test_max": 2})


def test_numbers_accept_integers_and_later_sources_win() -> None:
    cfg = TrainConfig.build(({"timeout_s": 5, "iterations": 7}, "file"), ({"iterations": 2}, "command line"))
    assert cfg.timeout_s == 5.0 and isinstance(cfg.timeout_s, float) and cfg.iterations == 2
    assert cfg.explicit == ["iterations", "timeout_s"]
    assert TrainConfig.build().explicit == [] and TrainConfig.build().seed == 0


def test_updated_marks_only_the_new_values_explicit() -> None:
    cfg = TrainConfig.build(({"iterations": 2}, "command line")).updated({"backend": "offline"}, "default backend")
    assert cfg.backend == "offline" and cfg.iterations == 2
    assert cfg.explicit == ["backend", "iterations"]
    assert cfg.with_env_defaults({"train_episodes": 10}).train_episodes == 10


def test_the_source_of_a_bad_value_is_named() -> None:
    with pytest.raises(UserError, match=r"^config file x.toml: bad seed = -1"):
        TrainConfig.build(({"seed": -1}, "config file x.toml"), ({"iterations": 2}, "command line"))
    with pytest.raises(UserError, match=r"^bad --seed -1"):
        TrainConfig.build(({"iterations": 2}, "config file x.toml"), ({"seed": -1}, "command line"))


def test_env_spec_defaults_never_replace_explicit_settings() -> None:
    defaults = get_spec("FrozenLake-v1").train_defaults
    assert defaults == {"train_episodes": 10}
    assert TrainConfig.build().with_env_defaults(defaults).train_episodes == 10
    mine = TrainConfig.build(({"train_episodes": 3}, "command line"))
    assert mine.with_env_defaults(defaults).train_episodes == 3
    with pytest.raises(UserError, match="unknown setting 'bogus'"):
        mine.with_env_defaults({"bogus": 1})


# ----------------------------------------------------------------------------------------------- files
def toml(tmp_path: Path, text: str, name: str = "c.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_toml_with_top_level_keys_or_a_train_table_loads_the_same(tmp_path: Path) -> None:
    top = toml(tmp_path, 'env_id = "FrozenLake-v1"\niterations = 3\ntrain-episodes = 5\n\n[env_kwargs]\n'
                         'is_slippery = true\n', "top.toml")
    table = toml(tmp_path, '[train]\nenv_id = "FrozenLake-v1"\niterations = 3\ntrain_episodes = 5\n'
                           'env_kwargs = { is_slippery = true }\n', "table.toml")
    a, b = load_config_file(top), load_config_file(table)
    assert a == b == {"env_id": "FrozenLake-v1", "iterations": 3, "train_episodes": 5,
                      "env_kwargs": {"is_slippery": True}}
    cfg = TrainConfig.build((a, f"config file {top}"))
    assert (cfg.env_id, cfg.iterations, cfg.train_episodes, cfg.env_kwargs) == (
        "FrozenLake-v1", 3, 5, {"is_slippery": True})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[training]\niterations = 3\n", "unknown section [training]; accepted: top-level settings or one [train]"),
        ("iterations = 3\n[train]\nseed = 1\n", "either at the top level or in [train], not both"),
        ("iterations = \n", "is not valid TOML"),
    ],
)
def test_bad_toml_files_are_refused_in_one_line(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(UserError) as info:
        load_config_file(toml(tmp_path, text))
    assert message in str(info.value) and "c.toml" in str(info.value)
    assert "\n" not in str(info.value).strip()


def test_missing_or_bad_json_config_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="cannot read config file"):
        load_config_file(tmp_path / "nope.toml")
    with pytest.raises(UserError, match="is not valid JSON"):
        load_config_file(toml(tmp_path, "{", "config.json"))
    with pytest.raises(UserError, match="expected a JSON object"):
        load_config_file(toml(tmp_path, "[1, 2]", "config.json"))


def test_a_runs_config_json_rebuilds_the_same_experiment(tmp_path: Path) -> None:
    cfg = TrainConfig.build(({"env_id": "CartPole-v1", "backend": "offline", "iterations": 1, "plots": False,
                              "progress": False, "heldout_episodes": 5, "candidates": 2, "seed": 3,
                              "logs_dir": str(tmp_path), "run_id": "first"}, "test"))
    first = train(cfg, log=lambda _m: None)
    saved = json.loads((first.run_dir / "config.json").read_text())
    assert saved["config"] == cfg.model_dump()
    settings = load_config_file(first.run_dir / "config.json")
    assert "run_id" not in settings and "explicit" not in settings
    again = TrainConfig.build((settings, "config.json"))
    drop = {"run_id", "explicit"}
    assert again.model_dump(exclude=drop) == cfg.model_dump(exclude=drop) and again.run_id is None
    second = train(again, log=lambda _m: None)
    assert second.run_dir != first.run_dir
    for key in ("best_eval_mean", "episodes_total", "env_steps_total", "best_iteration"):
        assert second.summary[key] == first.summary[key], key


# ----------------------------------------------------------------------------------------------- command line
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--seed", "-1"], "bad --seed -1: accepted an integer in 0..4294967295"),
        (["--seed", str(2**32)], "bad --seed 4294967296"),
        (["--run-id", "../../x"], 'bad --run-id "../../x": accepted a non-empty name without path separators'),
        (["--run-id", "/abs"], 'bad --run-id "/abs"'),
        (["--run-id", ""], 'bad --run-id ""'),
        (["--patience", "-1"], "bad --patience -1: accepted an integer >= 0"),
        (["--timeout", "0"], "bad --timeout 0.0: accepted a number of seconds > 0"),
        (["--max-retries", "-1"], "bad --max-retries -1"),
        (["--train-episodes", "0"], "bad --train-episodes 0"),
        (["--iterations", "three"], "--iterations: invalid int value: 'three'"),
    ],
)
def test_the_command_line_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                args: list[str], message: str) -> None:
    code = main(["train", "--backend", "offline", "--logs-dir", str(tmp_path), "--no-plots", "--no-progress", *args])
    out = capsys.readouterr()
    assert code == 2
    lines = out.err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in out.err, out.err
    assert not list(tmp_path.iterdir())  # nothing was started


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('iterations = "three"\n', 'bad iterations = "three": accepted an integer >= 0'),
        ("[train]\nevidence_gamma = \"high\"\n", 'bad evidence_gamma = "high"'),
        ("[train]\ngamma = \"high\"\n", 'bad evidence_gamma = "high"'),  # the old name reads, as today's
        ("env_kwargs = 3\n", "bad env_kwargs = 3"),
        ("[training]\niterations = 3\n", "unknown section [training]"),
        ("eval_start = 5\neval_max = 2\n", "bad test_max 2 with test_start 5"),  # the old names still read
        ("iteratons = 3\n", "unknown setting 'iteratons'"),
    ],
)
def test_bad_config_files_through_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str,
                                                   message: str) -> None:
    path = toml(tmp_path, text)
    logs = tmp_path / "logs"
    code = main(["train", "--config", str(path), "--backend", "offline", "--logs-dir", str(logs)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and message in err and "Traceback" not in err, err
    assert not logs.exists()
