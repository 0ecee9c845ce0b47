"""Base URLs: one that is not ``http(s)://`` with a host is refused before any run directory exists (one line, exit
2); a credential anywhere in a URL (``user:password@``, a ``?key=`` or ``#access_token=`` parameter) never reaches
config.json, the console or an error line, argparse's included. The server is the loopback fake of ``tests/fakes``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fakes import openai_server
from fakes.openai_server import FakeOpenAIServer
from fakes.tables import CARTPOLE, TableResponder

from llm_policy_gen.cli import main
from llm_policy_gen.clients.keys import redact, url_secrets, without_userinfo

MODEL = "openai:gpt-4.1-mini"
QUERY_KEY = "qsecret-0123456789"
FRAGMENT_TOKEN = "fsecret-9876543210"


def _train(tmp_path: Path, *args: str) -> list[str]:
    config = tmp_path / "fast.toml"
    config.write_text("heldout_episodes = 5\ntrain_episodes = 2\ncandidates = 1\n", encoding="utf-8")
    return ["train", "--env", CARTPOLE, "--iterations", "1", "--logs-dir", str(tmp_path / "logs"), "--config",
            str(config), "--no-progress", "--no-plots", "--max-retries", "0", *args]


def _one_line(err: str) -> str:
    """The one line a refusal prints (a second line, or a traceback, fails the unpacking or the assert)."""
    assert "Traceback" not in err, err
    (line,) = [x for x in err.splitlines() if x.strip()]
    return line


@pytest.mark.parametrize("url", ["localhost:8080/v1", "ftp://example.org/v1", "file:///etc/passwd", "http:///v1",
                                 "https://example.org:99999/v1", "//example.org/v1"])
def test_a_base_url_that_is_not_http_with_a_host_is_refused_before_the_run(tmp_path: Path, url: str,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert main(_train(tmp_path, "--backend", MODEL, "--base-url", url)) == 2
    line = _one_line(capsys.readouterr().err)
    assert "bad --base-url" in line and "accepted an http:// or https:// URL with a host" in line
    assert not (tmp_path / "logs").exists()


def test_compare_refuses_a_config_files_base_url_before_its_folder(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "c.toml"
    config.write_text('base_url = "file:///etc/passwd"\n', encoding="utf-8")
    out = tmp_path / "cmp"
    assert main(["compare", "--env", CARTPOLE, "--backends", MODEL, "--seeds", "0", "--config", str(config),
                 "--out", str(out), "--no-progress"]) == 2
    assert "bad base_url" in _one_line(capsys.readouterr().err) and not out.exists()


def test_a_base_url_variable_that_is_not_http_is_refused_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "localhost:8080/v1")
    assert main(_train(tmp_path, "--backend", MODEL)) == 2
    line = _one_line(capsys.readouterr().err)
    assert "OPENAI_BASE_URL=localhost:8080/v1" in line and "does not start with http:// or https://" in line
    assert not (tmp_path / "logs").exists()


def test_a_key_in_the_query_or_fragment_reaches_no_file_and_no_console(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    openai_server.clear_env(monkeypatch, openai_server._CLEARED)
    with FakeOpenAIServer(api_key=None, responder=TableResponder()) as server:
        url = f"{server.base_url}?api_key={QUERY_KEY}&api-version=2024#access_token={FRAGMENT_TOKEN}"
        code = main(_train(tmp_path, "--backend", MODEL, "--base-url", url))
    said = capsys.readouterr()
    (run,) = (tmp_path / "logs" / CARTPOLE).iterdir()
    recorded = json.loads((run / "config.json").read_text())["config"]["base_url"]
    # The OpenAI SDK puts its path after the query (POST /v1/?api_key=...chat/completions): the server answers 404,
    # echoing the URL with the key in it. That error reaches the transcript, the console and the exit line redacted.
    assert code == 1 and "NotFoundError" in said.err and "api_key=[REDACTED]" in said.err, said.err
    assert recorded == f"{server.base_url}?api_key=[REDACTED]&api-version=2024#access_token=[REDACTED]"
    for f in [p for p in run.rglob("*") if p.is_file()]:
        text = f.read_bytes()
        assert QUERY_KEY.encode() not in text and FRAGMENT_TOKEN.encode() not in text, f
    assert QUERY_KEY not in said.out + said.err and FRAGMENT_TOKEN not in said.out + said.err
    # the run records no credential, so a resume must be given the whole URL again
    assert main(["train", "--resume", str(run), "--iterations", "2"]) == 2
    assert "whose credential its config.json does not keep" in _one_line(capsys.readouterr().err)


def test_url_credentials_are_redacted_in_any_text() -> None:
    text = ("POST https://h.example/v1/chat?key=AIzaSyA-0123456789&alt=json failed; see "
            "https://bucket.s3.amazonaws.com/o?X-Amz-Credential=AKIA0123&X-Amz-Signature=abcdef0123456789 and "
            "https://h.example/cb#access_token=tok-0123456789&state=xyz")
    out = redact(text)
    for secret in ("AIzaSyA-0123456789", "AKIA0123", "abcdef0123456789", "tok-0123456789"):
        assert secret not in out
    assert "alt=json" in out and "state=xyz" in out  # ordinary parameters stay
    assert without_userinfo("https://u:pw@h.example/v1?model=gpt&Api-Key=k-0123") == \
        "https://h.example/v1?model=gpt&Api-Key=[REDACTED]"
    assert "k%2F0123456" in url_secrets("https://h.example/v1?token=k%2F0123456")
    assert "k/0123456" in url_secrets("https://h.example/v1?token=k%2F0123456")


@pytest.mark.parametrize("command", [["envs"], ["evaluate", "nowhere"], ["report", "nowhere"]])
def test_argparse_does_not_echo_a_urls_secrets(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """``--base-url`` given to a command that has none: argparse's "unrecognized arguments" line names the value."""
    url = f"https://user:hunter2-password@h.example/v1?key={QUERY_KEY}"
    assert main([*command, "--base-url", url, "--x\x1b[2J"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "unrecognized arguments" in line and "hunter2-password" not in line and QUERY_KEY not in line
    assert "\x1b" not in line and "\\x1b[2J" in line
