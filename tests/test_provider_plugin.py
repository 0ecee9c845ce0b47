"""A provider is one class plus one registry line (issue 17 item 3, issue 18 item 1).

``TinyClient`` below is a whole new provider: an OpenAI-compatible server with its own key variables
(``TINY_API_KEY``, else ``TINY_TOKEN``), its own base-URL variable (``TINY_BASE_URL``), default model and profile,
defined here and registered with one ``BACKENDS.register`` line (removed after each test). Nothing else in the
package names it, yet ``backends`` lists it, ``train`` refuses it without a key and trains with it against the
loopback fake of OpenAI's wire protocol (``tests/fakes/openai_server.py``), and its keys are redacted from every
file and from the console, including a key in a variable whose name does not end in ``_API_KEY``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
from fakes.openai_server import FakeOpenAIServer
from fakes.tables import CARTPOLE, TableResponder

from llm_policy_gen.backends import BACKENDS, default_backend_spec, get_profile, is_configured, parse_backend_spec
from llm_policy_gen.cli import main
from llm_policy_gen.clients.keys import redact
from llm_policy_gen.clients.openai import OpenAIClient
from llm_policy_gen.clients.profiles import ClientProfile

TINY_KEY = "tiny-key-0123456789abcdef"
TINY_TOKEN = "tiny-token-without-digits-abcdefgh"
"""A key no generic rule catches: no ``_API_KEY`` variable, no digit for the ``Bearer`` rule."""


class TinyClient(OpenAIClient):
    """The whole provider."""

    provider_name: ClassVar[str] = "tiny"
    description: ClassVar[str] = "a tiny OpenAI-compatible provider defined in a test"
    default_model: ClassVar[str] = "tiny-1"
    key_variables: ClassVar[tuple[str, ...]] = ("TINY_API_KEY", "TINY_TOKEN")
    base_url_variable: ClassVar[str | None] = "TINY_BASE_URL"
    needs_key: ClassVar[bool] = True
    auto_order: ClassVar[int | None] = None
    """Not chosen by ``train`` without ``--backend`` (the class variable is inherited: say so)."""
    default_base_url: ClassVar[str] = "http://127.0.0.1:9/v1"
    default_profile: ClassVar[ClientProfile] = ClientProfile("tiny", "Tiny", (0.0, 1.0), "max_tokens")
    compatible_profile: ClassVar[ClientProfile | None] = None


@pytest.fixture
def tiny(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAIServer]:
    """The registry line, and a fake server that ``TINY_BASE_URL`` points at; no key is set yet."""
    for name in ("TINY_API_KEY", "TINY_TOKEN", "TINY_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    BACKENDS.register("tiny", f"{__name__}:TinyClient", kind="client")
    try:
        with FakeOpenAIServer(api_key=None) as server:
            server.responder = TableResponder()
            monkeypatch.setenv("TINY_BASE_URL", server.base_url)
            yield server
    finally:
        BACKENDS.unregister("tiny")


def _train(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str, Path | None]:
    config = tmp_path / "fast.toml"
    config.write_text("heldout_episodes = 5\ntrain_episodes = 2\ncandidates = 1\n", encoding="utf-8")
    logs = tmp_path / "logs"
    code = main(["train", "--env", CARTPOLE, "--iterations", "1", "--logs-dir", str(logs), "--config", str(config),
                 "--no-progress", "--no-plots", *args])
    out, err = capsys.readouterr()
    runs = sorted((logs / CARTPOLE).iterdir()) if (logs / CARTPOLE).is_dir() else []
    assert len(runs) <= 1, runs
    return code, out, err, runs[0] if runs else None


def test_backends_lists_the_new_provider(tiny: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert parse_backend_spec("tiny") == ("tiny", "tiny-1") and get_profile("tiny").temperature_range == (0.0, 1.0)

    def listing() -> tuple[dict[str, object], str, str]:
        assert main(["backends", "--json"]) == 0
        rows = json.loads(capsys.readouterr().out)
        assert main(["backends"]) == 0
        text = capsys.readouterr().out
        row = next(r for r in rows["backends"] if r["name"] == "tiny")
        return row, next(line for line in text.splitlines() if line.startswith("tiny ")), rows["default"]

    row, line, default = listing()
    assert row == {"name": "tiny", "default_model": "tiny-1", "is_llm": True, "configured": False,
                   "key_variable": "TINY_API_KEY", "base_url": tiny.base_url,
                   "description": "a tiny OpenAI-compatible provider defined in a test"}
    assert line.split()[1:5] == ["tiny-1", "yes", "no", "TINY_API_KEY"] and default == "offline"
    monkeypatch.setenv("TINY_TOKEN", TINY_TOKEN)  # the second variable configures it too
    row, line, default = listing()
    assert row["configured"] is True and line.split()[3] == "yes" and TINY_TOKEN not in line
    # auto_order is None: train without --backend never picks it on its own
    assert is_configured("tiny") is True and default == "offline" and default_backend_spec()[0] == "offline"
    monkeypatch.setattr(TinyClient, "auto_order", 0)  # first in line: chosen, with the variable that is set
    assert default_backend_spec() == ("tiny", "TINY_TOKEN is set")


def test_train_without_its_key_is_one_line_naming_the_variable(
    tiny: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err, run = _train(tmp_path, capsys, "--backend", "tiny")
    assert code == 2 and run is None, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "TINY_API_KEY" in lines[0] and "Traceback" not in err, err
    assert tiny.requests == []  # refused before any call


@pytest.mark.parametrize(("variable", "key"), [("TINY_API_KEY", TINY_KEY), ("TINY_TOKEN", TINY_TOKEN)])
def test_trains_and_never_writes_its_key(tiny: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch, variable: str, key: str) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    monkeypatch.setenv(variable, key)
    tiny.api_key = key  # the server checks the key it was sent
    tiny.echo_auth = True  # and echoes it back in every answer (a hostile server)
    code, out, err, run = _train(tmp_path, capsys, "--backend", "tiny")
    assert code == 0 and run is not None, err
    summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    assert (summary["backend"], summary["model"], summary["iterations"]) == ("tiny", "tiny-1", 1)
    backend = json.loads((run / "config.json").read_text(encoding="utf-8"))["backend"]
    assert backend["provider"] == "tiny" and backend["key_source"] == variable
    assert backend["token_parameter"] == "max_tokens" and backend["base_url"] == tiny.base_url
    (request,) = tiny.requests
    assert request.headers["authorization"] == f"Bearer {key}"  # the key was sent, and echoed
    transcripts = [json.loads(x) for x in (run / "transcripts.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [t["valid"] for t in transcripts] == [True] and "[REDACTED]" in json.dumps(transcripts)
    files = [p for p in [*run.rglob("*"), *cache.rglob("*")] if p.is_file()]
    assert any(p.is_relative_to(cache) for p in files)  # the answer cache was written, and is scanned too
    assert [str(p) for p in files if key.encode() in p.read_bytes()] == []
    assert key not in out + err and f"key {variable} from the shell environment" in err + out
    assert redact(f"echo {key}!") == "echo [REDACTED]!"
