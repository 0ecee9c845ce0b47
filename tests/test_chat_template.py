"""Issue 29, item 10: a GGUF model's chat template is outside code, compiled and rendered under limits.

The real SmolLM2 GGUF (``tools/fetch_model.py``) is copied into ``tmp_path`` by the ``gguf`` package with its
``tokenizer.chat_template`` removed (a base model), broken, or replaced by one that loops: a base model and a broken
template are refused when the backend is built (exit 2, one line, no run directory); a template that loops on the
first prompt is refused the same way once ``--timeout`` has passed; one that loops on a later prompt fails that call
at ``--timeout`` (0 tokens, no text) instead of hanging. The bounds themselves are tested on
:mod:`llm_policy_gen.clients.chat_template` with an injected clock.
"""

from __future__ import annotations

import functools
import itertools
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from llm_policy_gen.clients.chat_template import MAX_PROMPT_CHARS, TemplateProblem, TemplateTimeout, compile_template

MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}]
LOOP = "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}"
"""About 10^10 empty iterations: hours of Jinja."""
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


# ------------------------------------------------------------------------------------- the bounds, no model needed
def test_rendering_stops_at_the_deadline_of_an_injected_clock() -> None:
    tpl = compile_template(LOOP + CHATML, "", "<|im_end|>")
    ticks = itertools.count()
    with pytest.raises(TemplateTimeout):
        tpl.render(MESSAGES, deadline=10_000, clock=lambda: float(next(ticks)))
    assert 10_000 < next(ticks) < 10_100  # stopped at the first check past the deadline
    ok = compile_template(CHATML, "", "<|im_end|>").render(MESSAGES, deadline=float("inf"))
    assert ok.text.endswith("<|im_start|>assistant\n") and ok.stop == ["<|im_end|>"]


@pytest.mark.parametrize("source", [
    "{{ 'x' * 1000000000 }}",  # one allocation of a GB
    "{{ [0] * 1000000000 }}",
    "{{ 10 ** 10000000 }}",
    "{{ '%0999999999d' % 1 }}",
    "{% for i in range(99999) %}{{ 'x' * 99999 }}{% endfor %}",  # 10 GB of output, 100 KB at a time
    "{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}",
    "{{ raise_exception('only user and assistant roles are supported') }}",
    "{{ messages[7]['content'] }}",
], ids=["str-repeat", "list-repeat", "power", "format-width", "output", "recursion", "raise", "index"])
def test_a_template_that_would_exhaust_memory_or_fails_is_a_template_problem(source: str) -> None:
    tpl = compile_template(source, "", "")
    with pytest.raises(TemplateProblem) as info:
        tpl.render(MESSAGES, deadline=float("inf"))
    assert len(str(info.value)) < 400
    if source.startswith("{% for"):
        assert f"{MAX_PROMPT_CHARS:,}" in str(info.value)


def test_a_template_syntax_error_names_its_line() -> None:
    with pytest.raises(TemplateProblem, match="TemplateSyntaxError at line 2"):
        compile_template("{% for m in messages %}\n{{ m['content'] }\n{% endfor %}", "", "")


# ------------------------------------------------------------------------------------------- with the real model
@pytest.fixture(scope="module")
def smollm2(request: pytest.FixtureRequest) -> Path:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed: `make test` installs it")
    pytest.importorskip("gguf", reason="the gguf package is not installed (dev extra)")
    path: Path = request.getfixturevalue("gguf")  # conftest.py's session fixture (after the skips above)
    return path


@functools.lru_cache(maxsize=1)
def _layout(src: Path) -> tuple[int, int, int, int, int]:
    """Where ``src``'s metadata lies, read once by the ``gguf`` package's reader (seconds of Python for the
    tokenizer's arrays): (number of entries, start and end of the chat template's entry, end of the tensor
    descriptions, start of the tensor data)."""
    import gguf

    reader = gguf.GGUFReader(src, "r")
    assert reader.endianess == gguf.GGUFEndian.LITTLE and reader.alignment == 32
    field = reader.fields[gguf.Keys.Tokenizer.CHAT_TEMPLATE]
    infos_end = max(t.field.offset + sum(p.nbytes for p in t.field.parts) for t in reader.tensors)
    n_kv = int(reader.fields["GGUF.kv_count"].parts[-1][0])
    return n_kv, field.offset, field.offset + sum(p.nbytes for p in field.parts), infos_end, reader.data_offset


def with_template(src: Path, dst: Path, template: str | None) -> Path:
    """A copy of the GGUF ``src`` at ``dst`` whose ``tokenizer.chat_template`` is ``template`` (None: removed): that
    one metadata entry replaced or dropped in the file's bytes, everything else copied as it is (the tensor data
    aligned again); llama.cpp's own reader then sees the template asked for."""
    import ctypes

    import gguf
    import llama_cpp

    n_kv, start, end, infos_end, data_start = _layout(src)
    data = src.read_bytes()
    key, entry = gguf.Keys.Tokenizer.CHAT_TEMPLATE.encode(), b""
    if template is not None:
        value = template.encode()
        entry = struct.pack(f"<Q{len(key)}sIQ", len(key), key, gguf.GGUFValueType.STRING, len(value)) + value
    head = data[:16] + struct.pack("<Q", n_kv - (template is None)) + data[24:start] + entry + data[end:infos_end]
    dst.write_bytes(head + b"\0" * (-len(head) % 32) + data[data_start:])
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    model = llama_cpp.llama_model_load_from_file(str(dst).encode(), params)
    buf = ctypes.create_string_buffer(1 << 16)
    n = llama_cpp.llama_model_meta_val_str(model, key, buf, len(buf))
    llama_cpp.llama_model_free(model)
    assert (buf.value.decode() if n >= 0 else None) == template
    return dst


def train(tmp_path: Path, model: Path, *extra: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "llm_policy_gen", "train", "--env", "FrozenLake-v1", "--backend", f"llamacpp:{model}",
         "--logs-dir", str(tmp_path / "logs"), "--iterations", "1", "--candidates", "1", "--repair-attempts", "0",
         "--heldout-episodes", "5", "--max-output-tokens", "300", "--no-plots", "--no-progress", "--run-id", "r",
         *extra],
        capture_output=True, text=True, cwd=tmp_path, timeout=timeout,
        env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "LLM_POLICY_GEN_WORKERS": "1"})


def one_line(err: str) -> str:
    """The refusal's one line; the model's load lines before it are progress (issue 59, item 12: a model's load is
    said; its template is read once it has loaded), and are there."""
    assert [x.split(" ", 2)[1] for x in err.splitlines() if x.startswith("llamacpp: load")] in (["loading"], [
        "loading", "loaded"]), err
    lines = [x for x in err.splitlines() if x.strip() and not x.startswith("llamacpp: load")]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.slow
def test_a_base_model_without_chat_template_is_refused_before_the_run(smollm2: Path, tmp_path: Path) -> None:
    from llm_policy_gen.clients.base import ClientOptions
    from llm_policy_gen.clients.llamacpp import LlamaCppClient
    from llm_policy_gen.errors import BackendConfigError

    base = with_template(smollm2, tmp_path / "base.gguf", None)
    r = train(tmp_path, base)
    assert r.returncode == 2, r.stderr
    line = one_line(r.stderr)
    assert "base.gguf has no chat template" in line and "instruction-tuned" in line
    assert not (tmp_path / "logs" / "FrozenLake-v1").exists()  # no run directory left
    # The check is the backend factory's, for the modes that send chat messages: the client itself loads the model
    # (a mode that reads token probabilities, such as a future --mode lm-policy, needs no template).
    client = LlamaCppClient(str(base), ClientOptions(n_ctx=512))
    with pytest.raises(BackendConfigError, match="no chat template"):
        client.check_chat()


@pytest.mark.slow
def test_a_template_that_does_not_compile_is_refused_with_one_line(smollm2: Path, tmp_path: Path) -> None:
    broken = with_template(smollm2, tmp_path / "broken.gguf", "{% for m in messages %}{{ m['content'] }")
    r = train(tmp_path, broken)
    assert r.returncode == 2, r.stderr
    line = one_line(r.stderr)
    assert "broken.gguf has a chat template that does not compile" in line and "TemplateSyntaxError" in line
    assert not (tmp_path / "logs" / "FrozenLake-v1").exists()  # no run directory left


@pytest.mark.slow
def test_a_template_that_loops_on_the_first_prompt_is_refused_at_timeout(smollm2: Path, tmp_path: Path) -> None:
    looping = with_template(smollm2, tmp_path / "loop.gguf", LOOP + CHATML)
    r = train(tmp_path, looping, "--timeout", "2", timeout=300)  # hung for hours
    assert r.returncode == 2, r.stderr
    line = one_line(r.stderr)
    assert "loop.gguf has a chat template that passed --timeout 2 s rendering the first prompt" in line
    assert not (tmp_path / "logs" / "FrozenLake-v1").exists()  # no run directory left


@pytest.mark.slow
def test_a_template_that_loops_later_fails_that_call_at_timeout(smollm2: Path, tmp_path: Path) -> None:
    """The first prompt (nothing learned yet, what the context check renders) passes; the iteration's prompt, with
    episodes in memory, loops: the call fails at --timeout with 0 tokens and no text, and the run ends."""
    import json

    later = "{% if 'episodes in memory' in messages[-1]['content'] %}" + LOOP + "{% endif %}" + CHATML
    model = with_template(smollm2, tmp_path / "later.gguf", later)
    r = train(tmp_path, model, "--timeout", "2", timeout=300)
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr
    assert not [x for x in r.stderr.splitlines() if x.startswith(("llama_", "ggml_", "load", "print_info"))], \
        r.stderr  # llama.cpp's own log lines are kept off the console
    lines = [json.loads(x) for x in (tmp_path / "logs" / "FrozenLake-v1" / "r" / "transcripts.jsonl").read_text(
        encoding="utf-8").splitlines()]
    assert len(lines) == 1
    (call,) = lines
    assert call["failed"] and "rendering the chat template passed --timeout 2 s" in call["error"]
    assert call["input_tokens"] == 0 and call["output_tokens"] == 0 and call["response_text"] == ""
