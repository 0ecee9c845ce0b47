"""Hardening round 4 (issue 29), items 13 and 14: what a new user hit on the command line (compare's options and
errors, plot's file names, ``make local``, W&B's folders, output folders that do not exist, config files that are not
files, have a byte-order mark or lost their settings, ``render_mode`` and one-bin tables)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from llm_policy_gen.cli import main

ROOT = Path(__file__).resolve().parents[1]


def one_line(err: str) -> str:
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def train(logs: Path, *extra: str) -> list[str]:
    return ["train", "--env", "CartPole-v1", "--backend", "offline", "--iterations", "1", "--candidates", "1",
            "--heldout-episodes", "3", "--logs-dir", str(logs), "--run-id", "r", "--no-plots", "--no-progress",
            *extra]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    logs = tmp_path_factory.mktemp("round4-run")
    assert main(train(logs)) == 0
    return logs / "CartPole-v1" / "r"


# ------------------------------------------------------------------------------------------- item 13
def test_compare_takes_heldout_episodes_as_train_does(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cmp"
    code = main(["compare", "--env", "CartPole-v1", "--backends", "offline", "--seeds", "0", "--iterations", "1",
                 "--heldout-episodes", "4", "--out", str(out), "--no-progress"])
    assert code == 0, capsys.readouterr().err
    summary = json.loads(next(out.rglob("summary.json")).read_text())
    assert summary["best_eval_episodes"] == 4
    assert "--heldout-episodes 4" in json.loads((out / "compare.json").read_text())["command"]


@pytest.mark.parametrize("argv", [["compare", "--env", "CartPole-v1", "--backends", "offline", "--bogus", "1"],
                                  ["plot", "somewhere", "--out", "x.png", "--bogus"]])
def test_an_unknown_option_is_reported_by_the_commands_own_parser(capsys: pytest.CaptureFixture[str],
                                                                  argv: list[str]) -> None:
    assert main(argv) == 2
    line = one_line(capsys.readouterr().err)
    assert line.startswith(f"llm-policy-gen {argv[0]}: error: unrecognized arguments: ") and "--bogus" in line


def test_plot_kind_both_writes_the_documented_names(tmp_path: Path, run_dir: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plot", str(run_dir), "--out", str(tmp_path / "curves.png"), "--kind", "both"]) == 0
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == ["curves-testing.png", "curves-training.png"]
    assert all(f"wrote {tmp_path / n}" in capsys.readouterr().out for n in written[:1])
    docs = (ROOT / "docs" / "getting-started.md").read_text() + (ROOT / "docs" / "experiments.md").read_text()
    assert "curves-training.png" in docs and "curves-testing.png" in docs


def test_make_local_installs_once(tmp_path: Path) -> None:
    venv, cache = tmp_path / "venv", tmp_path / "cache"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    (cache / "llm-policy-gen" / "wheels").mkdir(parents=True)
    (cache / "llm-policy-gen" / "wheels" / ".built-llama-cpp-python-0.3.36").write_text("")
    (venv / ".installed-run").write_text("")
    (venv / ".installed-local").write_text("")  # what the first `make local` leaves
    later = (ROOT / "pyproject.toml").stat().st_mtime + 10
    for stamp in venv.rglob(".installed-*"):
        os.utime(stamp, (later, later))
    os.utime(cache / "llm-policy-gen" / "wheels" / ".built-llama-cpp-python-0.3.36", (later, later))
    proc = subprocess.run(["make", "-n", "-C", str(ROOT), "local", f"VENV={venv}", f"XDG_CACHE_HOME={cache}"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "pip install" not in proc.stdout, proc.stdout
    (venv / ".installed-local").unlink()
    proc = subprocess.run(["make", "-n", "-C", str(ROOT), "local", f"VENV={venv}", f"XDG_CACHE_HOME={cache}"],
                          capture_output=True, text=True, timeout=60)
    assert '-e ".[local]"' in proc.stdout and ".installed-local" in proc.stdout


def test_wandb_writes_nothing_outside_the_run_directory(tmp_path: Path) -> None:
    pytest.importorskip("wandb")
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "XDG_"))}
    env.update(HOME=str(home), LLM_POLICY_GEN_NO_DOTENV="1", LLM_POLICY_GEN_WORKERS="1")
    proc = subprocess.run([sys.executable, "-m", "llm_policy_gen", *train(tmp_path / "logs", "--log", "wandb",
                                                                          "--no-cache")],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    outside = [p for p in home.rglob("*") if "wandb" in p.as_posix()]
    assert outside == [], outside
    assert list((tmp_path / "logs" / "CartPole-v1" / "r" / "wandb").glob("offline-run-*"))


@pytest.mark.parametrize("make_argv", [
    lambda d, r: ["plot", str(r), "--out", f"{d}/missing/x.png"],
    lambda d, r: ["plot", str(r), "--out", f"{d}/missing/x.png", "--kind", "both"],
    lambda d, r: ["report", str(r), "--out", f"{d}/missing/report.html"],
    lambda d, r: ["evaluate", str(r), "--episodes", "1", "--gif", f"{d}/missing/run.gif"],
])
def test_an_output_file_in_a_missing_folder_is_refused_and_nothing_is_made(
        tmp_path: Path, run_dir: Path, capsys: pytest.CaptureFixture[str], make_argv: object) -> None:
    argv = make_argv(tmp_path, run_dir)  # type: ignore[operator]
    before = sorted(p.name for p in run_dir.rglob("*"))
    assert main(argv) == 2
    line = one_line(capsys.readouterr().err)
    assert f"the folder '{tmp_path / 'missing'}' does not exist" in line
    assert not (tmp_path / "missing").exists()
    assert sorted(p.name for p in run_dir.rglob("*")) == before


# ------------------------------------------------------------------------------------------- item 14
def _limited() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))  # a read without bound fails here, not the machine


def test_a_config_that_is_not_a_regular_file_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.toml"
    os.mkfifo(fifo)  # opening it would wait for a writer forever
    big = tmp_path / "big.toml"
    big.write_text("# " + "x" * (5 * 1024 * 1024) + "\n")
    env = {**os.environ, "LLM_POLICY_GEN_NO_DOTENV": "1"}
    for path, message in (("/dev/zero", "not a regular file"), (str(fifo), "not a regular file"),
                          (str(tmp_path), "not a regular file"), (str(big), "larger than 4 MiB")):
        proc = subprocess.run([sys.executable, "-m", "llm_policy_gen", *train(tmp_path / "logs", "--config", path)],
                              capture_output=True, text=True, env=env, timeout=120, preexec_fn=_limited)
        line = one_line(proc.stderr)
        assert proc.returncode == 2 and f"cannot read config file {path}: {message}" in line, line
    assert not (tmp_path / "logs").exists()


def test_a_toml_file_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    config = tmp_path / "exp.toml"
    config.write_bytes(b"\xef\xbb\xbf" + b'env_id = "CartPole-v1"\niterations = 1\n')
    assert main(["train", "--config", str(config), "--backend", "offline", "--candidates", "1", "--heldout-episodes",
                 "2", "--logs-dir", str(tmp_path / "logs"), "--run-id", "r", "--no-plots", "--no-progress"]) == 0
    assert json.loads((tmp_path / "logs" / "CartPole-v1" / "r" / "config.json").read_text())["config"][
        "iterations"] == 1


def test_a_run_config_without_its_settings_says_so(tmp_path: Path, run_dir: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    record = json.loads((run_dir / "config.json").read_text())
    del record["config"]
    cut = tmp_path / "config.json"
    cut.write_text(json.dumps(record))
    assert main(train(tmp_path / "logs", "--config", str(cut))) == 2
    line = one_line(capsys.readouterr().err)
    assert "without its 'config' object" in line and "argv" not in line
    assert not (tmp_path / "logs").exists()


def test_render_mode_in_env_kwargs_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for command in (train(tmp_path / "logs", "--env-kwargs", '{"render_mode": "human"}'),
                    ["compare", "--env", "CartPole-v1", "--backends", "offline", "--seeds", "0", "--config",
                     str(tmp_path / "render.toml"), "--out", str(tmp_path / "cmp")]):
        (tmp_path / "render.toml").write_text('env_kwargs = { render_mode = "rgb_array" }\n')
        assert main(command) == 2
        line = one_line(capsys.readouterr().err)
        assert "render_mode is not accepted in --env-kwargs" in line
    assert not (tmp_path / "logs").exists() and not (tmp_path / "cmp").exists()


def test_one_bin_on_every_dimension_is_refused_without_a_warning(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert main(train(tmp_path / "logs", "--bins", "1,1,1,1", "--iterations", "3")) == 2
    line = one_line(capsys.readouterr().err)
    assert "bad --bins [1, 1, 1, 1]" in line and "one state" in line
    assert not (tmp_path / "logs").exists()
    with warnings.catch_warnings():  # one bin on some dimensions is a smaller table, and trains
        warnings.simplefilter("error")
        assert main(train(tmp_path / "logs", "--bins", "1,1,6,6")) == 0
