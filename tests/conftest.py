"""Test-wide safety: no real keys, no .env, no network beyond loopback, caches in a temporary folder."""

from __future__ import annotations

import importlib.util
import ipaddress
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# A suite started in the background by a non-interactive shell (``cmd &``) inherits SIGINT ignored, and so would every
# run a test interrupts with SIGINT (an ignored signal survives exec): the run would go on to its end. A handler does
# not survive exec, so with one here the runs the tests start see SIGINT as from a terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
# Likewise a suite started under ``nohup`` inherits SIGHUP ignored, and a run keeps an ignored SIGHUP ignored (on
# purpose: tests/test_run_interruptions.py); the tests that send SIGHUP test a run whose SIGHUP is at its default.
if hasattr(signal, "SIGHUP") and signal.getsignal(signal.SIGHUP) is signal.SIG_IGN:
    signal.signal(signal.SIGHUP, signal.SIG_DFL)

KEY_VARS = ("GEMINI_API_KEY", "GOOGLE_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY")
URL_VARS = ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "GOOGLE_GEMINI_BASE_URL", "OLLAMA_BASE_URL")


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    for name in KEY_VARS + URL_VARS + ("LLM_POLICY_GEN_PRICES", "LLM_POLICY_GEN_PROMPTS", "RAY_ADDRESS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LLM_POLICY_GEN_NO_DOTENV", "1")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    yield


_real_connect = socket.socket.connect


def _guarded_connect(self: socket.socket, address: object) -> object:
    host = address[0] if isinstance(address, tuple) else None
    if isinstance(host, str) and self.family in (socket.AF_INET, socket.AF_INET6):
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            ip = None
        if host != "localhost" and (ip is None or not ip.is_loopback):
            raise OSError(f"network blocked in tests: {host}")
    return _real_connect(self, address)  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket.socket, "connect", _guarded_connect)


@pytest.fixture(scope="session")
def gguf() -> Path:
    """SmolLM2-135M-Instruct's GGUF file (Q4_1, sha256-checked), fetched once for the whole test run by
    ``tools/fetch_model.py`` (the language-model tests share it).

    Under pytest-xdist every worker is a session of its own and calls this once: a file lock beside the models makes
    the workers fetch and check the file one at a time, so that two never download into, or write the checksum stamp
    of, the same file at once (the second finds the checked file and downloads nothing)."""
    from filelock import FileLock

    script = Path(__file__).resolve().parents[1] / "tools" / "fetch_model.py"
    spec = importlib.util.spec_from_file_location("fetch_model", script)
    assert spec is not None and spec.loader is not None
    fetch_model = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, fetch_model)  # its dataclasses look their module up there
    spec.loader.exec_module(fetch_model)
    models = fetch_model.models_dir()
    models.mkdir(parents=True, exist_ok=True)
    with FileLock(str(models / ".fetch.lock"), timeout=900):
        out = subprocess.run([sys.executable, str(script), "--path", "smollm2"], capture_output=True, text=True,
                             timeout=900)
    assert out.returncode == 0, out.stderr
    return Path(out.stdout.strip())
