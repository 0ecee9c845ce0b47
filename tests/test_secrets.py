"""Secrets (issue 19, items 1-4): URL passwords and keys never reach a file, a page or the console; a resumed run
names its endpoint and sends a key only to an endpoint named on its command line; the console says where each base
URL and key came from.

Runs go through the real CLI (``cli.main`` in process, or ``python -m llm_policy_gen`` in a subprocess) against the
loopback fake of the OpenAI API (``tests/fakes/openai_server.py``), which can play a hostile server that echoes the
request's ``Authorization`` header in its answers (``echo_auth``).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes import anthropic_server, openai_server
from fakes.gemini_server import FAKE_GEMINI_KEY, FakeGeminiServer, fake_gemini_fixture  # noqa: F401
from fakes.openai_server import FAKE_KEY, FakeOpenAIServer, ok
from fakes.tables import CARTPOLE, TableResponder

from llm_policy_gen.cli import main
from llm_policy_gen.clients.keys import redact, redact_all, url_secrets, without_userinfo

ROOT = Path(__file__).resolve().parents[1]
USER, PASSWORD = "alice", "pa%40ss-Word-7781"
"""The URL's password is percent-encoded: the SDK sends ``Basic base64(alice:pa@ss-Word-7781)``."""
DECODED = "pa@ss-Word-7781"
BASIC = base64.b64encode(f"{USER}:{DECODED}".encode()).decode()
SECRETS = (PASSWORD, DECODED, BASIC, FAKE_KEY)


@pytest.fixture
def hostile(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAIServer]:
    """A fake OpenAI server that checks no key and echoes the Authorization header in every answer."""
    openai_server.clear_env(monkeypatch, openai_server._CLEARED)
    with FakeOpenAIServer(api_key=None, responder=TableResponder()) as server:
        server.echo_auth = True
        monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
        yield server


def _with_password(url: str) -> str:
    return url.replace("http://", f"http://{USER}:{PASSWORD}@", 1)


def _train(tmp_path: Path, *args: str) -> list[str]:
    config = tmp_path / "fast.toml"
    config.write_text("heldout_episodes = 5\ntrain_episodes = 2\ncandidates = 2\n", encoding="utf-8")
    return ["train", "--env", CARTPOLE, "--iterations", "2", "--logs-dir", str(tmp_path / "logs"), "--config",
            str(config), "--no-progress", "--no-plots", *args]


def _leaks(folder: Path) -> list[str]:
    """Files under ``folder`` that hold any form of the password or the key."""
    out = []
    for p in folder.rglob("*"):
        if p.is_file():
            data = p.read_bytes()
            out += [f"{p.name}: {s}" for s in SECRETS if s.encode() in data]
    return out


def _run_dir(tmp_path: Path) -> Path:
    (run,) = (tmp_path / "logs" / CARTPOLE).iterdir()
    return run


# --- redaction, as a function -----------------------------------------------------------------------------------------
def test_redact_knows_url_passwords_their_basic_form_and_echoed_credentials() -> None:
    url = f"http://{USER}:{PASSWORD}@example.org/v1"
    forms = url_secrets(url)
    assert {PASSWORD, DECODED, BASIC} <= set(forms)
    assert without_userinfo(url) == "http://example.org/v1"
    # known or not, a URL's userinfo and an Authorization credential do not survive
    assert redact(f"see {url}") == "see http://[REDACTED]@example.org/v1"
    assert DECODED not in redact(f"Authorization: Basic {BASIC}")
    assert redact("Bearer sk-live-1234567890abcd") == "Bearer [REDACTED]"
    # ordinary words after "basic" or "bearer" stay
    assert redact("Basic physics: the bearer of the torque") == "Basic physics: the bearer of the torque"
    record = {"response_model": f"Basic {BASIC}", "list": [f"x {url}"], f"k {url}": 1}
    assert not any(s in json.dumps(redact_all(record)) for s in (DECODED, BASIC, PASSWORD))


# --- 1 and 2: a hostile server echoes the credentials -----------------------------------------------------------------
def test_url_password_and_echoed_credentials_reach_no_file_page_or_console(
    hostile: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    hostile.push(ok("not a table {authorization}"))  # the echo reaches response_text and a repair message too
    url = _with_password(hostile.base_url)
    code = main(_train(tmp_path, "--backend", "openai:gpt-4.1-mini", "--base-url", url, "--log", "csv,tensorboard"))
    out, err = capsys.readouterr()
    assert code == 0, err
    auth = {r.headers.get("authorization") for r in hostile.requests}
    assert auth == {f"Basic {BASIC}"}  # the SDK really sent the password, and the server echoed it
    run = _run_dir(tmp_path)
    record = json.loads((run / "config.json").read_text(encoding="utf-8"))
    assert record["config"]["base_url"] == hostile.base_url  # the endpoint, without user:password@
    lines = [json.loads(x) for x in (run / "transcripts.jsonl").read_text(encoding="utf-8").splitlines()]
    assert {x["response_model"] for x in lines} == {"Basic [REDACTED]"}
    assert any("not a table Basic [REDACTED]" == x["response_text"] for x in lines)
    assert list(cache.rglob("*.json"))  # the cache was written, and is scanned
    assert (run / "progress.csv").is_file() and list(run.rglob("events.out.tfevents*"))  # ... and the writers' files
    assert _leaks(run) == [] and _leaks(cache) == []
    assert not any(s in out + err for s in SECRETS)
    pytest.importorskip("jinja2")
    assert main(["report", str(run), "--out", str(tmp_path / "page.html")]) == 0
    capsys.readouterr()
    page = (tmp_path / "page.html").read_text(encoding="utf-8")
    assert not any(s in page for s in SECRETS)


def test_compare_with_a_url_password_keeps_it_out_of_its_files_and_stdout(
    hostile: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "sweep.toml"
    config.write_text(f'base_url = "{_with_password(hostile.base_url)}"\nheldout_episodes = 5\ntrain_episodes = 2\n'
                      "candidates = 1\ncache = false\n", encoding="utf-8")
    out_dir = tmp_path / "cmp"
    code = main(["compare", "--env", CARTPOLE, "--backends", "openai:gpt-4.1-mini", "--seeds", "0", "--iterations",
                 "1", "--config", str(config), "--out", str(out_dir), "--no-progress"])
    out, err = capsys.readouterr()
    assert code == 0, err
    meta = json.loads((out_dir / "compare.json").read_text(encoding="utf-8"))
    assert meta["settings"]["base_url"] == hostile.base_url
    said = [x for x in err.splitlines() if "calls go to" in x]  # once, before the first run
    assert said == [f"openai:gpt-4.1-mini: calls go to {hostile.base_url} (base URL: the base_url setting "
                    "(--base-url); key OPENAI_API_KEY from the shell environment)"]
    assert _leaks(out_dir) == []
    assert not any(s in out + err for s in SECRETS)


fake_openai = openai_server.fake_openai  # fixtures, found by pytest under these names
fake_anthropic = anthropic_server.fake_anthropic


@pytest.mark.parametrize("fixture", ["fake_openai", "fake_anthropic", "fake_gemini"])
def test_every_provider_s_model_field_echoing_the_key_is_redacted(
    fixture: str, request: pytest.FixtureRequest, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that puts the key in its answer's model name (``model``, Gemini's ``modelVersion``)."""
    server = request.getfixturevalue(fixture)
    cache = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    answer = TableResponder().answer(0)
    if isinstance(server, FakeGeminiServer):
        key, spec = FAKE_GEMINI_KEY, "gemini:gemini-2.5-flash"
        server.model_version = f"key={key}"
        server.responder = TableResponder()
    elif isinstance(server, FakeOpenAIServer):
        key, spec = FAKE_KEY, "openai:gpt-4.1-mini"
        server.responder = lambda body: answer
        server.echo_auth = True  # ``Bearer <key>`` in the model and the fingerprint
    else:
        key, spec = anthropic_server.FAKE_KEY, "anthropic:claude-haiku-4-5"
        server.push(*[anthropic_server.ok(answer, model=f"key={key}") for _ in range(8)])
    code = main(_train(tmp_path, "--backend", spec))
    out, err = capsys.readouterr()
    assert code == 0, err
    run = _run_dir(tmp_path)
    models = {json.loads(x)["response_model"] for x in (run / "transcripts.jsonl").read_text().splitlines()}
    assert models and all("[REDACTED]" in m for m in models), models
    leaked = [str(p) for p in [*run.rglob("*"), *cache.rglob("*")] if p.is_file() and key.encode() in p.read_bytes()]
    assert leaked == [] and key not in out + err


# --- 3: resuming a run made by someone else ---------------------------------------------------------------------------
def _first_iteration(tmp_path: Path, server: FakeOpenAIServer, recorded_url: str | None = None) -> Path:
    """A one-iteration run against ``server``; its config.json then records ``recorded_url`` as its --base-url
    (a run directory from someone else)."""
    assert main(_train(tmp_path, "--backend", "openai:gpt-4.1-mini", "--iterations", "1", "--base-url",
                       server.base_url)) == 0
    run = _run_dir(tmp_path)
    if recorded_url is not None:
        record = json.loads((run / "config.json").read_text(encoding="utf-8"))
        record["config"]["base_url"] = recorded_url
        (run / "config.json").write_text(json.dumps(record), encoding="utf-8")
    return run


def test_resume_of_a_run_recorded_with_a_remote_base_url_needs_it_named_again(
    hostile: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hostile.echo_auth = False
    run = _first_iteration(tmp_path, hostile, "https://collector.example.net/v1")
    capsys.readouterr()
    sent = len(hostile.requests)
    code = main(["train", "--resume", str(run), "--iterations", "2"])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert "https://collector.example.net/v1" in err and "--base-url" in err
    assert len(hostile.requests) == sent  # nothing was sent anywhere
    code = main(["train", "--resume", str(run), "--iterations", "2", "--base-url", hostile.base_url])
    err = capsys.readouterr().err
    assert code == 2 and "differs" in err and len(err.strip().splitlines()) == 1


def test_resume_names_its_endpoint_before_the_first_call(
    hostile: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hostile.echo_auth = False
    run = _first_iteration(tmp_path, hostile)  # recorded on loopback: no need to name it again
    capsys.readouterr()
    sent = len(hostile.requests)
    code = main(["train", "--resume", str(run), "--iterations", "2", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 0, err
    line = next(x for x in err.splitlines() if "calls go to" in x)
    assert hostile.base_url in line and "OPENAI_API_KEY from the shell environment" in line
    assert len(hostile.requests) > sent  # ... and the calls went there


def test_compare_resumes_its_runs_with_its_own_base_url(
    hostile: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A sweep whose endpoint is not loopback by name: its runs resume because compare names the URL again."""
    hostile.echo_auth = False
    remote = hostile.base_url.replace("127.0.0.1", "127.0.0.1.nip.invalid")  # not loopback by its name
    config = tmp_path / "sweep.toml"
    config.write_text(f'base_url = "{remote}"\ncandidates = 1\nheldout_episodes = 5\ncache = false\n',
                      encoding="utf-8")
    out_dir = tmp_path / "cmp"
    args = ["compare", "--env", CARTPOLE, "--backends", "offline", "--seeds", "0", "--config", str(config),
            "--out", str(out_dir), "--no-progress"]
    assert main([*args, "--iterations", "1"]) == 0
    run = out_dir / "runs" / CARTPOLE / "offline_s0"
    assert json.loads((run / "config.json").read_text(encoding="utf-8"))["config"]["base_url"] == remote
    (run / "summary.json").unlink()  # as a run killed before its end leaves it
    capsys.readouterr()
    # resumed directly, the run is refused (its recorded endpoint is not this machine) ...
    assert main(["train", "--resume", str(run)]) == 2
    assert "--base-url" in capsys.readouterr().err
    # ... while the sweep resumes it, passing its own base URL
    code = main([*args, "--iterations", "1"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "resumed" in err
    rows = (out_dir / "results.csv").read_text(encoding="utf-8")
    assert ",ok," in rows and (run / "summary.json").is_file()


# --- 4: where the base URL and the key came from ---------------------------------------------------------------------
def test_a_working_folders_env_file_setting_the_base_url_and_key_is_named(
    hostile: FakeOpenAIServer, tmp_path: Path
) -> None:
    """(Round 4, issue 29: a parent folder's .env is no longer read, and a key goes only to a URL set in the same
    place; so the .env of the working folder sets both here.)"""
    hostile.echo_auth = False
    work = tmp_path / "project" / "sub"
    work.mkdir(parents=True)
    (work / ".env").write_text(f"OPENAI_BASE_URL={hostile.base_url}\nOPENAI_API_KEY={FAKE_KEY}\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items()
           if k not in ("LLM_POLICY_GEN_NO_DOTENV", "OPENAI_BASE_URL", "OPENAI_API_KEY")}
    env.update(PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-m", "llm_policy_gen", *_train(tmp_path, "--backend",
                                                                           "openai:gpt-4.1-mini", "--iterations",
                                                                           "1")],
                          cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    notices = [x for x in proc.stderr.splitlines() if "calls go to" in x]
    assert len(notices) == 1, proc.stderr
    assert hostile.base_url in notices[0]
    assert f"OPENAI_BASE_URL from the .env file {(work / '.env').resolve()}" in notices[0]
    assert f"OPENAI_API_KEY from the .env file {(work / '.env').resolve()}" in notices[0]
    assert FAKE_KEY not in proc.stderr + proc.stdout
