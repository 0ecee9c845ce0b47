"""The part every scripted loopback fake shares: an HTTP server on 127.0.0.1 that answers from a queue of steps.

A fake provider server subclasses :class:`LoopbackServer` (the script, the default responder, the recorded requests
and the server's lifecycle) and :class:`LoopbackHandler` (one ``POST``: read and record the JSON body, take the next
step, and hang, fail or answer in the provider's wire format). Each request takes the next scripted step; when the
queue is empty, ``responder(request_json) -> text`` answers if one is set, else the fake's "script ran out" error; a
``gate(request_json) -> step | None`` may answer a request before the script does.
A ``raw`` step answers with any body and content type (a proxy's HTML page, JSON of the wrong shape).

:class:`SilentServer` accepts TCP connections and never says a word (a timeout on every attempt).
:data:`ANSWER_SCHEMA` is the JSON schema the client tests ask for: the shape of a table proposal, as pydantic emits
it (``$defs``/``$ref``, a ``$ref`` with a sibling ``description``).

Only 127.0.0.1 is used: the servers bind port 0 (a free port) and serve from daemon threads.
"""

from __future__ import annotations

import itertools
import json
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, Generic, Literal, Self, TypeVar

import pytest
from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "ANSWER_SCHEMA",
    "PROXY_VARIABLES",
    "LoopbackHandler",
    "LoopbackServer",
    "Recorded",
    "Responder",
    "ScriptStep",
    "SilentServer",
    "clear_env",
]

#: Proxy settings an SDK's HTTP client would honour; the fixtures unset them so that loopback stays loopback.
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")
#: Answers a request (its JSON body) with the text of the reply, once the script is empty.
Responder = Callable[[dict[str, Any]], str]


class Row(BaseModel):
    model_config = ConfigDict(extra="forbid")
    state: int = Field(ge=0)
    action: int = Field(ge=0)


class Note(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str


class TableProposal(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rationale: str
    rows: list[Row]
    note: Note = Field(description="a nested model: pydantic puts this description beside the $ref")


#: The schema the client tests send (a table proposal's shape).
ANSWER_SCHEMA: dict[str, Any] = TableProposal.model_json_schema()


@dataclass(frozen=True)
class ScriptStep:
    """One scripted answer; each fake's ``Step`` subclass adds the fields of its wire format.

    The class methods build the three kinds; ``fields`` are the subclass's own fields.
    """

    kind: Literal["ok", "error", "hang", "raw"]
    text: str | None = ""
    input_tokens: int = 0
    output_tokens: int = 0
    status: int = 200
    retry_after: str | None = None
    """The ``retry-after`` header of an error (seconds or an HTTP date)."""
    message: str = ""
    seconds: float = 0.0
    """How long a ``hang`` keeps silent."""
    body: str = ""
    """The body of a ``raw`` answer, sent as it is."""
    content_type: str = "application/json"
    """The content type of a ``raw`` answer."""

    @classmethod
    def answer(cls, text: str | None, input_tokens: int, output_tokens: int, **fields: Any) -> Self:
        """A successful answer that says ``text`` and reports these token counts."""
        return cls("ok", text=text, input_tokens=input_tokens, output_tokens=output_tokens, **fields)

    @classmethod
    def failure(cls, status: int, retry_after: float | str | None = None, **fields: Any) -> Self:
        """An error answer with HTTP ``status``; ``retry_after`` becomes the ``retry-after`` header."""
        return cls("error", status=status, retry_after=None if retry_after is None else str(retry_after), **fields)

    @classmethod
    def hang(cls, seconds: float) -> Self:
        """Say nothing for ``seconds`` (longer than the client's timeout), then drop the connection."""
        return cls("hang", seconds=seconds)

    @classmethod
    def raw(cls, body: str | dict[str, Any], content_type: str = "text/html", status: int = 200) -> Self:
        """Answer ``body`` (a dict is sent as JSON) with this content type and status, whatever the wire format."""
        text = json.dumps(body) if isinstance(body, dict) else body
        return cls("raw", status=status, body=text, content_type=content_type)


StepT = TypeVar("StepT", bound=ScriptStep)


@dataclass(frozen=True)
class Recorded:
    """One request as the server saw it (header names lower-cased)."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


class LoopbackServer(Generic[StepT]):
    """A scripted server on 127.0.0.1 (a context manager): the queue of steps, the recorded requests, the thread.

    Subclasses set :attr:`handler` and :attr:`name` and say how the responder's text becomes a step
    (:meth:`_reply_step`) and what answers when the script has run out (:meth:`_ran_out_step`).

    Args:
        steps: The first scripted steps (more with :meth:`push`).
        responder: Answers once the script is empty.
        api_key: When set, a request presenting another key is refused (how, is the handler's business).
    """

    handler: ClassVar[type[LoopbackHandler]]
    name: ClassVar[str]
    """Names the server thread (``fake-<name>``) and the "script ran out" message."""
    record_type: ClassVar[type[Recorded]] = Recorded
    poll_interval_s: ClassVar[float] = 0.02
    """How often the serving thread looks for a shutdown request."""

    def __init__(
        self, steps: Iterable[StepT] = (), responder: Responder | None = None, api_key: str | None = None
    ) -> None:
        self.queue: deque[StepT] = deque(steps)
        self.responder = responder
        self.gate: Callable[[Any], StepT | None] | None = None
        """Sees each request body before the script; a step it returns answers that request (e.g. a 400 to every
        request that asks for a JSON schema), None lets the script answer."""
        self.api_key = api_key
        self.requests: list[Recorded] = []
        self.outlasted = 0
        """Stalls (hangs, trickles) that ran their whole time with the client still there: a client that honours its
        timeout leaves this at 0 while the stall is far longer than the timeout, however busy the machine."""
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._ids = itertools.count(1)
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- scripting -------------------------------------------------------------------------------------------------
    def push(self, *steps: StepT) -> Self:
        """Append steps to the script."""
        with self._lock:
            self.queue.extend(steps)
        return self

    @property
    def pending(self) -> int:
        """Scripted steps not used yet."""
        with self._lock:
            return len(self.queue)

    @property
    def url(self) -> str:
        """Root URL of the server (``http://127.0.0.1:PORT``)."""
        if self._httpd is None:
            raise RuntimeError(f"the fake {self.name} server is not running")
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    @property
    def bodies(self) -> list[Any]:
        """JSON bodies of the recorded requests."""
        with self._lock:
            return [r.body for r in self.requests]

    # --- lifecycle -------------------------------------------------------------------------------------------------
    def start(self) -> Self:
        """Bind a free port on 127.0.0.1 and serve from a daemon thread."""
        handler = type("Handler", (self.handler,), {"fake": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": self.poll_interval_s},
            name=f"fake-{self.name.lower()}",
            daemon=True,
        )
        self._thread.start()
        return self

    def close(self) -> None:
        """Wake hanging requests, stop serving and free the port."""
        self._closing.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- answering -------------------------------------------------------------------------------------------------
    def record(self, method: str, path: str, headers: Iterable[tuple[str, str]], body: Any) -> Recorded:
        """Keep one request (header names lower-cased) in :attr:`requests`."""
        request = self.record_type(method, path, {k.lower(): v for k, v in headers}, body)
        with self._lock:
            self.requests.append(request)
        return request

    def next_step(self, body: Any) -> StepT:
        """The gate's step, else the next scripted step, else the responder's answer, else :meth:`_ran_out_step`."""
        if self.gate is not None:
            gated = self.gate(body)
            if gated is not None:
                return gated
        with self._lock:
            if self.queue:
                return self.queue.popleft()
        if self.responder is not None:
            request = body if isinstance(body, dict) else {}
            text = self.responder(request)
            return self._reply_step(text, max(1, self._prompt_chars(request) // 4), max(1, len(text) // 4))
        return self._ran_out_step(f"fake {self.name} server: no scripted step left and no responder")

    def note_outlasted(self) -> None:
        """Count one stall that ran its whole time (:attr:`outlasted`)."""
        with self._lock:
            self.outlasted += 1

    def request_id(self) -> str:
        """A fresh request id (``req_fake000001``, ...)."""
        return f"req_fake{next(self._ids):06d}"

    def _prompt_chars(self, body: dict[str, Any]) -> int:
        """Size of the prompt, for the responder's token counts (four characters a token)."""
        return len(json.dumps(body.get("messages", "")))

    def _reply_step(self, text: str, input_tokens: int, output_tokens: int) -> StepT:
        """A successful step that answers ``text``."""
        raise NotImplementedError

    def _ran_out_step(self, message: str) -> StepT:
        """The error step that answers once the script and the responder are both missing."""
        raise NotImplementedError


class LoopbackHandler(BaseHTTPRequestHandler):
    """One connection of a :class:`LoopbackServer`; subclasses speak the provider's wire format.

    ``do_POST`` reads and records the JSON body, gives :meth:`reject` a chance to refuse the request (wrong path,
    wrong key, missing fields), then plays the next step: a hang here, an error or an answer in the subclass.
    """

    fake: LoopbackServer[Any]  # set on the per-server subclass
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are two writes: avoid the 40 ms delayed-ACK stall
    content_type = "application/json"

    def log_message(self, format: str, *args: Any) -> None:  # silence the default stderr log
        return

    def do_POST(self) -> None:  # http.server's naming
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw or b"null")
        except json.JSONDecodeError:
            body = raw.decode("utf-8", "replace")
        self.fake.record("POST", self.path, self.headers.items(), body)
        self.request_id = self.fake.request_id()
        if self.reject(body):
            return
        step = self.fake.next_step(body)
        if step.kind == "hang":  # say nothing until the client gives up (or the server closes), then drop it
            if not self.fake._closing.wait(step.seconds):
                self.fake.note_outlasted()
            self.close_connection = True
        elif step.kind == "raw":
            self.send_bytes(step.status, step.body.encode(), step.content_type)
        elif step.kind == "error":
            self.send_step_error(step)
        else:
            self.send_step_ok(step, body)

    def reject(self, body: Any) -> bool:
        """Answer a request that no step should see (and return True); by default every request goes through."""
        return False

    def send_step_error(self, step: Any) -> None:
        """Answer with the scripted error ``step``."""
        raise NotImplementedError

    def send_step_ok(self, step: Any, body: Any) -> None:
        """Answer the request ``body`` with the scripted success ``step``."""
        raise NotImplementedError

    def send_json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        """Send ``payload`` as JSON; a client that already hung up (a timeout) is no error."""
        self.send_bytes(status, json.dumps(payload).encode(), self.content_type, headers)

    def send_bytes(
        self, status: int, data: bytes, content_type: str, headers: dict[str, str] | None = None
    ) -> None:
        """Send ``data`` as the body; a client that already hung up (a timeout) is no error."""
        try:
            self.send_response(status)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True


def clear_env(monkeypatch: pytest.MonkeyPatch, names: Iterable[str]) -> None:
    """Unset each of ``names`` and its lower-case spelling (proxy variables come in both)."""
    for name in names:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


class SilentServer:
    """A TCP listener on 127.0.0.1 that accepts every connection and never answers (a context manager).

    Requests to it time out in the read phase; the connections are closed when the server is.
    """

    def __init__(self) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._sock.settimeout(0.05)
        self._port: int = self._sock.getsockname()[1]
        self._held: list[socket.socket] = []
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="fake-silent", daemon=True)

    @property
    def url(self) -> str:
        """Root URL of the listener (``http://127.0.0.1:PORT``)."""
        return f"http://127.0.0.1:{self._port}"

    @property
    def connections(self) -> int:
        """Connections accepted so far."""
        return len(self._held)

    def closed_by_client(self, patience_s: float = 5.0) -> int:
        """Connections the client has closed (an end of stream on our side; the server closes none before it stops).

        A client whose per-attempt timeout works has closed each attempt's connection by the time its call raised; the
        socket may take a moment to see that, so this waits up to ``patience_s`` for every held connection to close
        (a bound on a wait, not on how long anything took)."""
        deadline = time.monotonic() + patience_s
        while True:
            closed = sum(1 for conn in list(self._held) if _at_end_of_stream(conn))
            if closed == len(self._held) or time.monotonic() >= deadline:
                return closed
            time.sleep(0.02)

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self._held.append(conn)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closing.set()
        self._thread.join(timeout=5)
        for conn in self._held:
            conn.close()
        self._sock.close()


def _at_end_of_stream(conn: socket.socket) -> bool:
    """Whether the peer has closed ``conn``: the request bytes nobody read are drained, then a read that would not
    block finds the end of the stream."""
    try:
        while conn.recv(65536, socket.MSG_DONTWAIT):
            pass
    except BlockingIOError:
        return False
    except OSError:
        return True
    return True
