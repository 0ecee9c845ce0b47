"""What the SDK clients (OpenAI, Anthropic, Gemini) share, so that each of them only speaks its provider's wire format.

:class:`SDKClient` is their base: a provider's facts as class variables (what ``--backend NAME`` needs, where its key
and base URL come from), the sampling settings checked against the provider's profile, every call run under the one
retry policy (:func:`~.retry.timed_call_with_retries`), and the faults every SDK shares turned into the contract's
fault kinds (:mod:`.faults`: an unreachable server, a timeout, a body that is not the provider's JSON). Around each
attempt:

* **A whole-attempt deadline** (:mod:`.deadline`): each attempt runs on a worker thread, waited for at most
  ``retry.timeout_s`` (and half a second); past that it is a :class:`~.faults.DeadlinePassed` and its connection is
  shut down (each SDK's HTTP client reports its answers' connections through :meth:`SDKClient.http_event_hooks`).
* **Local servers** (``local=True``: Ollama, an OpenAI-compatible server on a loopback address) get the local
  retry defaults (:meth:`~.retry.RetryPolicy.resolved`: 600 s, no retry of a timed-out attempt) and at most
  ``options.local_concurrency`` calls at once (the other calls wait in the client).
* **Structured output refused** (:mod:`.structured`): the client steps once to the next mode the provider offers
  and sends the same call again at once; the mode sticks (:attr:`SDKClient.structured_mode`).

A provider's client implements four hooks: ``_send`` (one SDK call in a given mode), ``_read`` (the SDK's answer as a
:class:`~.base.Completion`), ``_classify_sdk`` (its SDK's status errors) and ``_bad_request_text`` (the text of a 400,
for the structured-output check).
"""
from __future__ import annotations

import dataclasses
import functools
import importlib.util
import json
import os
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from ..errors import BackendConfigError
from ..storage.safe_json import is_bomb
from . import keys
from .base import ClientOptions, ClientSettings, Completion, Message, Request
from .deadline import AttemptDeadline
from .faults import (
    DeadlinePassed,
    MalformedResponse,
    TimedOut,
    Unreachable,
    is_timeout,
    is_transport_fault,
    not_json,
    preview,
    unreachable_reason,
)
from .profiles import ClientProfile
from .retry import FaultKind, timed_call_with_retries
from .structured import StructuredOutput, structured_refusal

__all__ = ["SDKClient", "public_url", "split_system"]

def public_url(url: str) -> str:
    """``url`` without ``user:password@`` and with any known key removed (for config.json and error messages)."""
    return keys.redact(keys.without_userinfo(url))


def split_system(messages: Sequence[Message]) -> tuple[str | None, list[Message]]:
    """System messages joined by a blank line (None if there are none), and the other turns.

    Raises:
        ValueError: No user or assistant turn is left.
    """
    system = [m.content for m in messages if m.role == "system"]
    turns = [m for m in messages if m.role != "system"]
    if not turns:
        raise ValueError("a request needs at least one user message besides the system prompt")
    return ("\n\n".join(system) if system else None), turns


@dataclass
class _Call:
    """Bookkeeping of one ``complete`` call (local to it, so never shared between threads)."""

    sends: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


class SDKClient(ABC):
    """The shared half of an SDK client (see the module doc); subclasses speak one provider's API.

    Args:
        provider: Provider name as in the backend spec.
        model: Model name sent to the provider.
        options: Base URL, retry policy and sampling.
        profile: The provider's quirks; the sampling settings are checked against it.
        base_url: The URL calls go to (named in errors and ``describe``).
        key: The key sent (kept only to redact it from error texts); ``key_source`` says where it came from.
        key_variable: The variable an auth error tells the user to set.
        sleep: Called between retries (tests pass a recorder).
        local: This client's server is on this machine (see the module doc; a class whose ``local`` is True always
            is); ``self.options`` holds the policy resolved for it, ``self.local_server`` says which.

    Raises:
        BackendConfigError: Empty model, or a temperature outside the profile's range.
    """

    is_llm: ClassVar[bool] = True
    Options: ClassVar[type[ClientSettings]] = ClientSettings
    """The options ``train`` takes for this client (see :class:`~llm_policy_gen.clients.base.ClientSettings`)."""
    api: ClassVar[str] = ""
    """The provider API used, for ``describe``."""

    # --- what a provider needs: the backend registry and ``llm-policy-gen backends`` read these ---------------------
    provider_name: ClassVar[str] = ""
    """The backend's name (``--backend NAME``), as the records name the provider."""
    description: ClassVar[str] = ""
    """One line for ``llm-policy-gen backends``."""
    default_model: ClassVar[str] = ""
    """The model of ``--backend NAME`` without ``:MODEL`` (empty: the spec must name one)."""
    key_variables: ClassVar[tuple[str, ...]] = ()
    """Environment variables holding the key, in order of preference; every one is redacted from all that is written
    once the class is defined (:func:`~.keys.register_key_variables`)."""
    base_url_variable: ClassVar[str | None] = None
    """The SDK's own base-URL variable, honoured as well as ``--base-url``."""
    needs_key: ClassVar[bool] = False
    """A call without a key is refused before it is made (one line naming :attr:`key_variables`)."""
    auto_order: ClassVar[int | None] = None
    """Place among the providers ``train`` tries without ``--backend`` (lowest first; None: never chosen so)."""
    requires: ClassVar[str | None] = None
    """A module that must be importable for the backend to work (an extra); "configured" then means installed."""
    default_profile: ClassVar[ClientProfile]
    """The provider's quirks (:meth:`profile_for` may choose another by base URL)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        keys.register_key_variables(cls.key_variables)

    @classmethod
    def find_key(cls) -> str | None:
        """The key set in the first of :attr:`key_variables` that holds one, else None."""
        return keys.first_value(cls.key_variables)

    @classmethod
    def key_name(cls) -> str:
        """The variable a user should set (first choice), empty when the provider takes no key."""
        return cls.key_variables[0] if cls.key_variables else ""

    @classmethod
    def key_found_in(cls) -> str:
        """The variable the key is read from (the first one set), else the one to set."""
        return next((v for v in cls.key_variables if os.environ.get(v, "").strip()), cls.key_name())

    @classmethod
    def configured_url(cls, explicit: str | None) -> str | None:
        """``explicit`` (``--base-url``, checked with the settings), else :attr:`base_url_variable`'s value (a
        :class:`BackendConfigError` when it is no http(s) URL with a host), else None."""
        variable = cls.base_url_variable
        url = (explicit or "").strip()
        if not url and variable:
            url = os.environ.get(variable, "").strip()
            problem = keys.http_url_problem(url) if url else None
            if problem:
                raise BackendConfigError(f"{variable}={public_url(url)} (from {keys.variable_source(variable)}) "
                                         f"cannot be a base URL: {problem}")
        return url or None

    @classmethod
    def require_key(cls) -> str:
        """The key, or :class:`BackendConfigError` naming the variables to set."""
        key = cls.find_key()
        if key is None:
            raise BackendConfigError(f"the {cls.provider_name} backend needs an API key: set "
                                     f"{' or '.join(cls.key_variables)} (in the environment or .env)")
        return key

    @classmethod
    def profiles(cls) -> tuple[ClientProfile, ...]:
        """Every profile this class may use."""
        return (cls.default_profile,)

    @classmethod
    def profile_for(cls, base_url: str) -> ClientProfile:
        """The profile for calls to ``base_url``."""
        return cls.default_profile

    @classmethod
    def configured(cls, check_server: bool = False) -> bool | None:
        """True when the backend can be used as it is: its extra is installed, its key is set (or it takes none).
        None means "not checked" (a server that only ``check_server`` would ask)."""
        if cls.requires is not None:
            return importlib.util.find_spec(cls.requires) is not None
        return cls.find_key() is not None if cls.key_variables else True
    free: ClassVar[bool] = False
    """True for a model that runs on this machine: its calls cost 0 and need no price."""

    local: ClassVar[bool] = False
    """The class always runs its model on this machine (the in-process model); see ``local_server``."""
    whole_attempt_deadline: ClassVar[bool] = True
    """Run each attempt under the whole-attempt deadline (module doc); False for a client that bounds its own
    attempts (a model in process, whose abandoned attempt would hold the model)."""
    takes_seed: ClassVar[bool] = False
    """The provider samples with a given seed (``Request.seed`` is sent), so that a repair is a new sample. At
    temperature 0 a repair also goes warmer (:meth:`temperature_for`), so that it cannot get the same answer."""

    @property
    def cache_identity(self) -> str:
        """What names the model in the answer cache's key (a local model says its file's hash here)."""
        return self.model

    def __init__(
        self,
        provider: str,
        model: str,
        options: ClientOptions,
        profile: ClientProfile,
        *,
        base_url: str,
        key: str | None,
        key_source: str,
        key_variable: str,
        sleep: Callable[[float], None] = time.sleep,
        local: bool = False,
    ) -> None:
        if not model or not model.strip():
            raise BackendConfigError(f"{provider} needs a model name: --backend {provider}:MODEL")
        if key is not None:  # the key and the URL it goes to were set in one place (the shell, one .env)
            keys.check_same_source(key_source, self.base_url_variable, bool((options.base_url or "").strip()))
        profile.check_sampling(options.sampling)
        self.provider: str = provider
        self.model: str = model.strip()
        self.local_server = local or self.local
        """The server is on this machine: the local retry defaults and at most ``local_concurrency`` calls at once."""
        self.options = dataclasses.replace(options, retry=options.retry.resolved(self.local_server))
        self.serves_at_once: int | None = max(1, options.local_concurrency) if self.local_server else None
        """Calls served at once (see :func:`~.base.calls_at_once`); None: no bound of the client's own."""
        self._slots = threading.BoundedSemaphore(self.serves_at_once) if self.serves_at_once else None
        self._deadline = AttemptDeadline()
        """Each attempt's whole-attempt deadline, and its connection to shut down past it."""
        self.profile = profile
        self.base_url = base_url
        self.key_source = key_source
        self.key_variable = key_variable
        self._sleep = sleep
        self.reached = False
        """An attempt of this client got an answer from its server (any answer, an HTTP error included). Until then a
        refused connection is a definite answer, not retried (see :func:`~.retry.call_with_retries`); a resumed run
        whose calls reached the server before sets it (:meth:`~.session.LLMSession.load_state_dict`)."""
        self._redact: Callable[[str], str] = functools.partial(keys.redact, extra=[key] if key else [])
        self._structured = StructuredOutput(profile.structured_modes)

    # --- the contract ----------------------------------------------------------------------------------------------
    @property
    def structured_mode(self) -> str:
        """How structured calls ask for JSON now (one of :data:`~.base.STRUCTURED_MODES`); settable."""
        return self._structured.mode

    @structured_mode.setter
    def structured_mode(self, mode: str) -> None:
        self._structured.mode = mode

    def complete(self, request: Request) -> Completion:
        """Answer ``request`` under the retry policy; see the module doc for the faults and the fallback."""
        if self._slots is None:
            return self._complete(request)
        with self._slots:  # a local server serves this many calls at once
            return self._complete(request)

    def temperature_for(self, request: Request) -> float | None:
        """The temperature ``request`` is sent at: the configured one, except that a repair (attempt 2 and later) of
        a call asked at temperature 0 goes at 0.3 per repair (capped by the profile): the same settings gave the
        refused answer before, and at temperature 0 decoding is greedy, so a new seed alone would change nothing."""
        t = self.options.sampling.temperature
        if t != 0 or request.key.attempt <= 1:
            return t
        return min(self.profile.temperature_range[1], 0.3 * (request.key.attempt - 1), 1.0)

    def _complete(self, request: Request) -> Completion:
        call = _Call()

        def attempt() -> Completion:
            if request.output.json_schema is None:
                return self._attempt(request, "none", call)
            return self._structured.send(lambda mode: self._attempt(request, mode, call), self._refusal)

        answer, _, latency = timed_call_with_retries(
            attempt,
            self.classify,
            self.options.retry,
            describe=f"{self.provider}:{self.model} at {public_url(self.base_url)}",
            key_variable=self.key_variable,
            sleep=self._sleep,
            redact=self._redact,
            retry_unreachable=self.reached,
        )
        extra = dict(answer.extra)
        note = self._structured.take_notes()
        if note:
            extra["structured_output_fallback"] = self._redact(note)
        return dataclasses.replace(answer, latency_s=latency, transport_attempts=call.sends, extra=extra)

    def classify(self, exc: BaseException) -> tuple[FaultKind, float | None]:
        """The fault kind of ``exc`` for :func:`~.retry.call_with_retries`."""
        if isinstance(exc, MalformedResponse):
            return "retry", None
        if isinstance(exc, TimedOut):
            return "timeout", None
        if isinstance(exc, DeadlinePassed):
            return ("retry", None) if self.options.retry.retry_timeouts else ("fatal", None)
        if isinstance(exc, Unreachable):
            return "unreachable", None
        fault = self._classify_sdk(exc)
        if fault is not None:
            return fault
        return ("retry", None) if is_transport_fault(exc) else ("fatal", None)

    def describe(self) -> dict[str, Any]:
        """JSON-able description for config.json: never a key, the URL without userinfo."""
        return {
            "provider": self.provider,
            "model": self.model,
            "is_llm": self.is_llm,
            "base_url": public_url(self.base_url),
            "api": self.api,
            "structured_output": self.structured_mode,
            "key_source": self.key_source,
            "token_parameter": self.profile.token_parameter,
            "temperature_range": list(self.profile.temperature_range),
            "sampling": asdict(self.options.sampling),
            "retry": self.options.retry.to_dict(),
            "local": self.local_server,
            "takes_seed": self.takes_seed,
            **({"local_concurrency": self.options.local_concurrency} if self.local_server else {}),
            **self._describe_extra(),
        }

    # --- one attempt -----------------------------------------------------------------------------------------------
    def _attempt(self, request: Request, mode: str, call: _Call) -> Completion:
        """One HTTP request in ``mode``, with the shared faults turned into :class:`Unreachable` and
        :class:`MalformedResponse`."""
        call.sends += 1
        label = self.profile.label
        try:
            if self.whole_attempt_deadline:
                response = self._deadline.run(lambda: self._send(request, mode), self.options.retry.attempt_timeout_s)
            else:
                response = self._send(request, mode)
        except json.JSONDecodeError as exc:
            self.reached = True
            raise not_json(label, f"{type(exc).__name__}: {exc}") from None
        except DeadlinePassed:
            self.reached = True
            raise
        except Exception as exc:
            if is_bomb(exc):  # a body nested too deeply, or a number of thousands of digits
                raise not_json(label, f"the body cannot be read as JSON ({type(exc).__name__})") from None
            reason = unreachable_reason(exc, self.options.retry.timeout_s)
            if reason is None:
                self.reached = True
                raise
            raise (TimedOut if is_timeout(exc) else Unreachable)(reason) from exc
        self.reached = True
        if isinstance(response, (str, bytes)):  # the SDKs hand back the text of a non-JSON body
            text = response.decode("utf-8", "replace") if isinstance(response, bytes) else response
            raise not_json(label, f"got {preview(text)}")
        try:
            answer = self._read(response, mode)
        except (AttributeError, TypeError, KeyError, IndexError) as exc:  # a field of the wrong type
            raise not_json(label, f"{type(exc).__name__}: {exc}") from None
        return dataclasses.replace(answer, structured_output=mode)

    def http_event_hooks(self) -> dict[str, list[Callable[[Any], None]]]:
        """``event_hooks`` for the SDK's HTTP client (httpx2 or httpx), so that an attempt past its deadline has its
        connection shut down (:meth:`.deadline.AttemptDeadline.event_hooks`)."""
        return self._deadline.event_hooks()

    def _refusal(self, exc: BaseException) -> str | None:
        return structured_refusal(self._bad_request_text(exc))

    # --- the provider's part ---------------------------------------------------------------------------------------
    @abstractmethod
    def _send(self, request: Request, mode: str) -> Any:
        """One SDK call asking for JSON in ``mode`` (``"none"``: plain text); returns the SDK's answer."""

    @abstractmethod
    def _read(self, response: Any, mode: str) -> Completion:
        """The SDK's answer as a completion (text, usage, finish reason, refusal, model, extra)."""

    @abstractmethod
    def _classify_sdk(self, exc: BaseException) -> tuple[FaultKind, float | None] | None:
        """The fault kind of the SDK's own errors (HTTP statuses), or None for the shared rules."""

    @abstractmethod
    def _bad_request_text(self, exc: BaseException) -> str | None:
        """The text (message, parameter name) of an HTTP error that may refuse structured output, else None."""

    def _describe_extra(self) -> dict[str, Any]:
        """Provider-specific entries of :meth:`describe`."""
        return {}
