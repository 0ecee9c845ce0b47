"""A ``.env`` in the working folder: keys, base URLs and the like are read; a variable that decides which code a
process runs when it starts (``PYTHONPATH``, ``LD_PRELOAD``, ``PATH``, ...) is refused in one line, exit 2, before
anything is set, run or made; the names it sets are shown escaped. Run as a user runs the command: a subprocess
whose working folder holds the ``.env``, with ``.env`` loading on and no ``PYTHON*`` variable of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from llm_policy_gen.clients.envfile import REFUSED_NAMES, refused_because
from llm_policy_gen.clients.keys import env_notice, load_env
from llm_policy_gen.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
_CLEARED = ("LLM_POLICY_GEN_NO_DOTENV", "OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "GEMINI_API_KEY",
            "GOOGLE_API_KEY", "RAY_ADDRESS", "XDG_CACHE_HOME")
#: The package is put on sys.path by the command itself, so that the child's environment has no PYTHONPATH of its
#: own (one set would be kept over the .env's, and hide what the .env does).
_BOOT = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); from llm_policy_gen.cli import main; "
         "sys.exit(main(sys.argv[1:]))")
_SITECUSTOMIZE = "import pathlib\npathlib.Path(__file__).with_name('MARKER').write_text('ran')\n"


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in _CLEARED and not k.startswith("PYTHON")}
    return subprocess.run([sys.executable, "-c", _BOOT, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def _planted(tmp_path: Path, line: str = "PYTHONPATH=.") -> Path:
    (tmp_path / ".env").write_text(f"OPENAI_API_KEY=sk-planted-0123456789\n{line}\n", encoding="utf-8")
    (tmp_path / "sitecustomize.py").write_text(_SITECUSTOMIZE, encoding="utf-8")
    return tmp_path


def _refusal(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, done.stderr
    lines = [x for x in done.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


def test_train_refuses_a_dotenv_that_sets_pythonpath_before_anything(tmp_path: Path) -> None:
    folder = _planted(tmp_path)
    done = _cli(folder, "train", "--env", "FrozenLake-v1", "--backend", "offline", "--iterations", "1",
                "--heldout-episodes", "5", "--no-plots", "--no-progress", "--logs-dir", "logs")
    line = _refusal(done)
    assert "sets PYTHONPATH, which decides what Python runs when it starts" in line and ".env" in line
    assert "sk-planted" not in done.stderr + done.stdout
    assert sorted(p.name for p in folder.iterdir()) == [".env", "sitecustomize.py"]  # no marker, no logs/


def test_compare_with_workers_refuses_it_before_a_worker_starts(tmp_path: Path) -> None:
    """``compare --workers 2`` starts new interpreters (its workers, the limits manager, multiprocessing's resource
    tracker): with the .env's PYTHONPATH each would run the folder's sitecustomize.py."""
    folder = _planted(tmp_path)
    done = _cli(folder, "compare", "--env", "FrozenLake-v1", "--backends", "offline", "--seeds", "0-1",
                "--iterations", "1", "--heldout-episodes", "5", "--workers", "2", "--out", "cmp", "--no-progress")
    assert "PYTHONPATH" in _refusal(done)
    assert not (folder / "MARKER").exists() and not (folder / "cmp").exists()


@pytest.mark.parametrize("line", ["PYTHONSTARTUP=./sitecustomize.py", "PYTHONHOME=.", "PYTHONINSPECT=1",
                                  "PYTHON_BASIC_REPL=1", "LD_PRELOAD=./evil.so", "LD_LIBRARY_PATH=.",
                                  "DYLD_INSERT_LIBRARIES=./evil.dylib", "PATH=.", "BASH_ENV=./rc", "ENV=./rc",
                                  "IFS=x", "PERL5OPT=-Mevil", "NODE_OPTIONS=--require=./evil.js", "GCONV_PATH=.",
                                  "GLIBC_TUNABLES=glibc.malloc.check=3", "MALLOC_CHECK_=3", "JAVA_TOOL_OPTIONS=-x",
                                  "export PYTHONPATH=.", "'PYTHONPATH'=.", "path=."])
def test_every_start_up_variable_is_refused_and_nothing_is_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              line: str) -> None:
    monkeypatch.delenv("LLM_POLICY_GEN_NO_DOTENV")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    before = dict(os.environ)
    env = tmp_path / ".env"
    env.write_text(f"OPENAI_API_KEY=sk-planted-0123456789\n{line}\n", encoding="utf-8")
    with pytest.raises(UserError, match="a .env may set keys, base URLs and the like, never such a variable"):
        load_env(env)
    assert dict(os.environ) == before


def test_the_denylist_keeps_what_the_docs_use() -> None:
    for name in ("RAY_ADDRESS", "XDG_CACHE_HOME", "OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL",
                 "GOOGLE_GEMINI_BASE_URL", "OLLAMA_BASE_URL", "GEMINI_API_KEY", "LLM_POLICY_GEN_PROMPTS",
                 "LLM_POLICY_GEN_PRICES", "MPLBACKEND", "OMP_NUM_THREADS", "HF_HOME", "MUJOCO_GL"):
        assert refused_because(name) is None, name
    assert {"PATH", "BASH_ENV", "GCONV_PATH", "NODE_OPTIONS"} <= set(REFUSED_NAMES)


def test_allowed_variables_still_work(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    (tmp_path / ".env").write_text(f"OPENAI_API_KEY=sk-allowed-0123456789\nXDG_CACHE_HOME={cache}\n"
                                   "RAY_ADDRESS=127.0.0.1:1\n", encoding="utf-8")
    done = _cli(tmp_path, "backends", "--json")
    assert done.returncode == 0, done.stderr
    assert "note: .env set OPENAI_API_KEY, RAY_ADDRESS, XDG_CACHE_HOME (variables already set are kept)" in done.stderr
    rows = {r["name"]: r for r in json.loads(done.stdout)["backends"]}
    assert rows["openai"]["configured"] is True and "sk-allowed" not in done.stdout + done.stderr


def test_names_with_escapes_or_bidi_characters_are_shown_escaped(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("RED\x1b[31mNAME=1\nAB\u202eCD=2\nPLAIN_NAME=3\n", encoding="utf-8")
    done = _cli(tmp_path, "backends", "--json")
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stderr and "\u202e" not in done.stderr
    assert "'AB\\u202eCD'" in done.stderr and "'RED\\x1b[31mNAME'" in done.stderr and "PLAIN_NAME" in done.stderr


def test_a_refused_name_is_escaped_in_the_refusal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LLM_POLICY_GEN_NO_DOTENV")
    env = tmp_path / ".env"
    env.write_text("LD_\x1b[2JPRELOAD=x\n", encoding="utf-8")
    with pytest.raises(UserError) as caught:
        load_env(env)
    assert "\x1b" not in str(caught.value) and "'LD_\\x1b[2JPRELOAD'" in str(caught.value)
    assert env_notice(["A\u202eB"]) == "note: .env set 'A\\u202eB' (variables already set are kept)"


def test_a_dotenv_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    (tmp_path / ".env").write_bytes(b"OPENAI_API_KEY=\xff\xfe\n")
    line = _refusal(_cli(tmp_path, "backends"))
    assert "cannot be read as a .env file" in line
