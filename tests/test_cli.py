import json
import subprocess
import sys
from pathlib import Path

import pytest

from llm_policy_gen.cli import main

ROOT = Path(__file__).resolve().parents[1]


def run_cli(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_envs_lists_shipped_specs_with_sizes(capsys):
    code, out, _ = run_cli(capsys, "envs")
    assert code == 0
    line = next(x for x in out.splitlines() if x.startswith("CartPole-v1"))
    assert "324" in line and "3x3x6x6" in line
    assert any(x.startswith("FrozenLake-v1") and " 16 " in x for x in out.splitlines())


def test_backends_labels_offline_as_not_an_llm_and_never_prints_keys(capsys, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-SECRET-123456")
    code, out, _ = run_cli(capsys, "backends")
    assert code == 0
    assert "NOT an LLM" in next(x for x in out.splitlines() if x.startswith("offline"))
    assert "yes" in next(x for x in out.splitlines() if x.startswith("openai"))
    assert "SECRET" not in out
    assert "train without --backend uses: openai" in out


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["train", "--env", "NoSuchEnv-v0"], "unknown environment 'NoSuchEnv-v0'"),
        (["train", "--iterations", "-1"], "bad --iterations -1"),
        (["train", "--backend", "gpt"], "unknown backend 'gpt'"),
        (["train", "--backend", "replay:/no/such/file.jsonl"], "does not exist"),
        (["train", "--backend", "openai"], "OPENAI_API_KEY"),
        (["train", "--config", "/no/such.toml"], "cannot read config file"),
        (["evaluate", "/no/such/policy.json"], "does not exist"),
        (["train", "--env-kwargs", "[1]"], "expected a JSON object"),
    ],
)
def test_user_mistakes_exit_2_with_one_line(capsys, argv, fragment, tmp_path):
    code, out, err = run_cli(capsys, *argv, *(["--logs-dir", str(tmp_path)] if argv[0] == "train" else []))
    assert code == 2
    assert fragment in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_train_then_evaluate_json(capsys, tmp_path):
    code, out, err = run_cli(capsys, "train", "--env", "CartPole-v1", "--backend", "offline", "--iterations", "2",
                             "--logs-dir", str(tmp_path), "--no-progress")
    assert code == 0
    run_dir = Path(out.strip().splitlines()[-1].split(": ", 1)[1])
    assert (run_dir / "summary.json").is_file()
    assert "NOT an LLM" in err
    code, out, _ = run_cli(capsys, "evaluate", str(run_dir), "--episodes", "5", "--json")
    assert code == 0
    result = json.loads(out)
    assert {"mean", "std", "episodes", "steps", "returns", "min", "max", "env_id", "seeds"} <= set(result)
    assert result["episodes"] == 5 and len(result["returns"]) == 5 and result["env_id"] == "CartPole-v1"
    code2, out2, _ = run_cli(capsys, "evaluate", str(run_dir / "best_policy.json"), "--episodes", "5", "--json")
    assert json.loads(out2) == result  # same seeds, same result


def test_evaluate_refuses_a_policy_for_another_spec(capsys, tmp_path):
    code, out, _ = run_cli(capsys, "train", "--env", "FrozenLake-v1", "--backend", "offline", "--iterations", "1",
                           "--logs-dir", str(tmp_path), "--no-progress", "--no-plots")
    run_dir = Path(out.strip().splitlines()[-1].split(": ", 1)[1])
    policy = json.loads((run_dir / "best_policy.json").read_text())
    policy["env_id"] = "CartPole-v1"
    bad = tmp_path / "wrong.json"
    bad.write_text(json.dumps(policy))
    code, _, err = run_cli(capsys, "evaluate", str(bad))
    assert code == 2 and "the policy" in err and len(err.strip().splitlines()) == 1


def test_config_file_and_command_line_precedence(capsys, tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('[train]\niterations = 1\nseed = 3\nheldout-episodes = 10\n')
    code, out, _ = run_cli(capsys, "train", "--config", str(cfg), "--seed", "4", "--backend", "offline",
                           "--logs-dir", str(tmp_path), "--no-progress", "--no-plots")
    assert code == 0
    run_dir = Path(out.strip().splitlines()[-1].split(": ", 1)[1])
    conf = json.loads((run_dir / "config.json").read_text())["config"]
    assert conf["iterations"] == 1 and conf["seed"] == 4 and conf["heldout_episodes"] == 10
    bad = tmp_path / "bad.toml"
    bad.write_text("iterations = 1\nwhatever = 2\n")
    code, _, err = run_cli(capsys, "train", "--config", str(bad), "--logs-dir", str(tmp_path))
    assert code == 2 and "unknown setting 'whatever'" in err


@pytest.mark.slow
@pytest.mark.parametrize("script", ["cartpole.py", "frozen_lake.py"])
def test_agent_scripts_run_as_subprocesses(tmp_path, script):
    proc = subprocess.run(
        [sys.executable, str(ROOT / "agents" / script), "--backend", "offline", "--iterations", "2", "--logs-dir",
         str(tmp_path), "--no-plots"],
        capture_output=True, text=True, timeout=120,
        env={"PATH": "/usr/bin:/bin", "LLM_POLICY_GEN_NO_DOTENV": "1", "HOME": str(tmp_path),
             "PYTHONPATH": str(ROOT)},  # this checkout's package, whichever checkout the venv installed
    )
    assert proc.returncode == 0, proc.stderr
    assert "run directory:" in proc.stdout


def test_python_dash_m_entry_point(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "llm_policy_gen", "envs"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0 and "CartPole-v1" in proc.stdout


def test_unwritable_logs_dir_is_a_user_error(capsys, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    code, _, err = run_cli(capsys, "train", "--backend", "offline", "--iterations", "1", "--logs-dir", str(blocker))
    assert code == 2 and "cannot create the run directory" in err and "Traceback" not in err


def test_a_compare_out_that_is_a_file_is_a_user_error_and_the_file_stays(capsys, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    for out in (blocker, blocker / "sub"):
        code, _, err = run_cli(capsys, "compare", "--env", "CartPole-v1", "--backends", "offline", "--seeds", "0",
                               "--iterations", "1", "--out", str(out))
        assert code == 2 and "cannot create the comparison folder" in err and "Traceback" not in err
        assert err.count("\n") == 1
    assert blocker.read_text() == "not a folder" and [p.name for p in tmp_path.iterdir()] == ["file"]
