"""``--log wandb``: an offline W&B run in the run directory, with the redacted configuration and nothing else of
the machine: no key or URL password in any file W&B writes, even when both are on the command line's way in."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("wandb")

PLANTED_KEY = "sk-planted-wandb-key-5f1e2d"
PLANTED_PASSWORD = "pw-planted-in-url-8c4b"


def _train(tmp_path: Path, *extra: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    run_env = dict(os.environ)
    run_env.update({"OPENAI_API_KEY": PLANTED_KEY, "WANDB_CONFIG_DIR": str(tmp_path / "wandb-config"),
                    "WANDB_CACHE_DIR": str(tmp_path / "wandb-cache"), "WANDB_DATA_DIR": str(tmp_path / "wandb-data")})
    run_env.update(env or {})
    args = ["train", "--env", "CartPole-v1", "--backend", "offline", "--iterations", "2", "--heldout-episodes", "10",
            "--logs-dir", str(tmp_path / "logs"), "--run-id", "wb", "--no-plots", "--quiet", "--log", "wandb",
            "--base-url", f"http://user:{PLANTED_PASSWORD}@127.0.0.1:9/v1", *extra]
    return subprocess.run([sys.executable, "-m", "llm_policy_gen", *args], capture_output=True, text=True,
                          env=run_env, cwd=tmp_path, timeout=300)


def test_an_offline_wandb_run_holds_the_scalars_and_no_key_or_url_password(tmp_path: Path) -> None:
    proc = _train(tmp_path)
    assert proc.returncode == 0, proc.stderr
    run_dir = tmp_path / "logs" / "CartPole-v1" / "wb"
    runs = list((run_dir / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    written = [p for p in tmp_path.rglob("*") if p.is_file() and "wandb" in p.relative_to(tmp_path).as_posix()]
    data = {p: p.read_bytes() for p in written}
    log = b"".join(v for p, v in data.items() if p.suffix == ".wandb")
    assert log, "no .wandb log was written"
    assert b"eval/best_test_mean" in log and b"time/episodes_total" in log  # the scalars
    assert b'"CartPole-v1"' in log and b"http://127.0.0.1:9/v1" in log  # the configuration, URL without userinfo
    for path, content in data.items():
        assert PLANTED_KEY.encode() not in content, path
        assert PLANTED_PASSWORD.encode() not in content, path
    assert PLANTED_PASSWORD not in proc.stdout + proc.stderr
    assert not (runs[0] / "files" / "requirements.txt").exists()  # nothing of the machine is captured
    assert not (runs[0] / "files" / "wandb-metadata.json").exists()


def test_without_the_wandb_library_it_is_one_line_naming_the_extra(tmp_path: Path) -> None:
    blocker = tmp_path / "block" / "wandb"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('wandb is not installed here')\n")
    path = os.pathsep.join([str(tmp_path / "block"), os.environ.get("PYTHONPATH", "")])
    proc = _train(tmp_path, env={"PYTHONPATH": path})
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--log wandb needs wandb" in lines[0] and "[wandb]" in lines[0], proc.stderr
    assert not (tmp_path / "logs" / "CartPole-v1" / "wb").exists()
