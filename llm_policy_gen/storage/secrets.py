"""Secrets kept out of everything written: the redaction of key values, URL passwords and secret-looking URL
parameters, and where each variable came from (the shell or a ``.env`` file).

A leaf of the bottom floor (``tests/data/floors.toml``), so that the lock's holder note, the prompt templates'
record and the configuration redact and say where a variable came from without reaching up into the clients;
:mod:`llm_policy_gen.clients.keys` loads the keys and re-exports these functions.
"""

from __future__ import annotations

import os
import re
from typing import Any

__all__ = ["register_key_variables", "note_source", "variable_source", "known_keys", "url_secrets",
           "secret_parameter", "without_userinfo", "remember_url", "redact", "redact_all"]

#: Every provider's key variables (each client class adds its own when it is defined, see
#: :meth:`~.sdk.SDKClient.__init_subclass__`): their values are redacted, whatever the variable's name.
_KEY_VARIABLES: set[str] = set()


def register_key_variables(names: tuple[str, ...] | list[str]) -> None:
    """Redact the values of the variables ``names`` from everything written from now on (a provider's keys)."""
    _KEY_VARIABLES.update(names)


#: Variable -> the ``.env`` file :func:`~llm_policy_gen.clients.keys.load_env` took it from (variables not listed
#: came from the shell).
_DOTENV_SOURCES: dict[str, str] = {}


def note_source(name: str, where: str) -> None:
    """Remember that the ``.env`` file ``where`` set the variable ``name`` (:func:`variable_source`)."""
    _DOTENV_SOURCES[name] = where


def variable_source(name: str) -> str:
    """Where the variable ``name`` came from: ``"the .env file PATH"`` or ``"the shell environment"``."""
    where = _DOTENV_SOURCES.get(name)
    if where is not None and name in os.environ:
        return f"the .env file {where}"
    return "the shell environment"


def known_keys() -> list[str]:
    """Every secret known now (for redaction): the key values set in the environment (the variables of every
    provider class defined in this process, see :func:`register_key_variables`, and any other ``*_API_KEY``), the
    passwords of base URLs set in the environment (``*_BASE_URL``) and of URLs given on the command line
    (:func:`remember_url`), each also in the forms a server may echo (see :func:`url_secrets`)."""
    values: list[str] = []
    for name, value in os.environ.items():
        v = value.strip()
        if name in _KEY_VARIABLES or name.endswith("_API_KEY"):
            if len(v) >= 4:
                values.append(v)
        elif name.endswith("_BASE_URL"):
            values.extend(url_secrets(v))
    values.extend(_REMEMBERED)
    return values


#: Secrets of URLs given on the command line (:func:`remember_url`), in every form :func:`url_secrets` gives.
_REMEMBERED: set[str] = set()
_MIN_SECRET = 4
"""Shorter passwords are not replaced inside texts (they would cut ordinary words); URLs lose them all the same."""


def url_secrets(url: str) -> list[str]:
    """The secret forms of ``url``'s ``user:password@``: the password as written and percent-decoded, ``user:password``
    and its base64 (what ``Authorization: Basic`` carries); and the values of its query and fragment parameters named
    like a secret (:func:`secret_parameter`), as written and decoded. Empty when the URL holds none."""
    import base64
    from urllib.parse import unquote, urlsplit

    params = _parameter_secrets(url)
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return params
    if "@" not in parts.netloc:
        return params
    userinfo = parts.netloc.rsplit("@", 1)[0]
    user, sep, password = userinfo.partition(":")
    forms: set[str] = set()
    for u, p in {(user, password), (unquote(user), unquote(password))}:
        secret = p if sep else u  # ``https://TOKEN@host`` carries the token as the user name
        if len(secret) >= _MIN_SECRET:
            forms.add(secret)
        pair = f"{u}:{p}"
        forms.add(base64.b64encode(pair.encode("utf-8")).decode("ascii"))
        if len(p) >= _MIN_SECRET:
            forms.add(pair)
    return sorted(forms | set(params))


#: Query or fragment parameter names that carry a credential (``key``, ``api_key``, ``access_token``,
#: ``client_secret``, ``password``, ``sig``, ``X-Amz-Signature``, ``X-Amz-Credential``, ``auth``), matched as parts of
#: the name with case, ``-``, ``_`` and ``.`` ignored.
_SECRET_NAME = re.compile(r"key|token|secret|passw|pwd|sig|auth|credential|session|cookie|jwt")
#: A parameter of a query or fragment: its separator, name and value.
_PARAMETER = re.compile(r"([?#&;])([^=&#;?]*)=([^&#;]*)")
#: A URL in a text (up to a space, a quote or an angle bracket).
_URL = re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://[^\s'\"<>]+")
_REDACTED = "[REDACTED]"


def secret_parameter(name: str) -> bool:
    """Whether a URL's query or fragment parameter ``name`` looks like one that carries a credential."""
    from urllib.parse import unquote

    return bool(_SECRET_NAME.search(re.sub(r"[-_.\s]", "", unquote(name).lower())))


def _parameter_secrets(url: str) -> list[str]:
    """The values of ``url``'s secret-looking query and fragment parameters, as written and percent-decoded."""
    from urllib.parse import unquote_plus

    at = min((i for i in (url.find("?"), url.find("#")) if i >= 0), default=-1)
    forms: set[str] = set()
    for _, name, value in _PARAMETER.findall(url[at:] if at >= 0 else ""):
        if secret_parameter(name) and value != _REDACTED:
            forms.update(v for v in (value, unquote_plus(value)) if len(v) >= _MIN_SECRET)
    return sorted(forms)


def _parameters_redacted(url: str) -> str:
    """``url`` with the value of each secret-looking query and fragment parameter replaced by ``[REDACTED]``."""
    at = min((i for i in (url.find("?"), url.find("#")) if i >= 0), default=-1)
    if at < 0:
        return url

    def hide(m: re.Match[str]) -> str:
        sep, name, value = m.groups()
        return f"{sep}{name}={_REDACTED}" if value and secret_parameter(name) else m.group(0)

    return url[:at] + _PARAMETER.sub(hide, url[at:])


def without_userinfo(url: str) -> str:
    """``url`` without its credentials (what config.json, the console and the pages show): its ``user:password@``
    part dropped, and the values of its query and fragment parameters named like a secret (``?key=...``,
    ``&access_token=...``, ``#sig=...``: :func:`secret_parameter`) replaced by ``[REDACTED]``."""
    from urllib.parse import urlsplit, urlunsplit

    url = _parameters_redacted(url)
    try:
        parts = urlsplit(url)
    except ValueError:
        return _URL_USERINFO.sub(r"\1", url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


def remember_url(url: str | None) -> None:
    """Redact the password of ``url`` (a ``--base-url``) from everything written from now on in this process."""
    if url:
        _REMEMBERED.update(url_secrets(url))


#: ``scheme://user:password@`` in any text: the userinfo goes, whatever the password.
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^\s/@]+@")
#: ``Basic <base64>`` and ``Bearer <token>`` credentials, as an echoed ``Authorization`` header carries them.
_AUTH_HEADER = re.compile(r"(?i)\b(Basic|Bearer)(\s+)([A-Za-z0-9+/._~-]{8,}=*)")


def _credential(match: re.Match[str]) -> str:
    """An ``Authorization`` credential redacted; ordinary words after "basic" or "bearer" are left alone."""
    import base64
    import binascii

    scheme, space, token = match.groups()
    if scheme.lower() == "basic":
        try:
            secret = ":" in base64.b64decode(token, validate=True).decode("utf-8")
        except (binascii.Error, ValueError):
            secret = False
    else:
        secret = len(token) >= 12 and any(c.isdigit() for c in token)
    return f"{scheme}{space}[REDACTED]" if secret else match.group(0)


def _redact_with(text: str, secrets: list[str]) -> str:
    for value in secrets:
        if value:
            text = text.replace(value, "[REDACTED]")
    text = _URL_USERINFO.sub(r"\1[REDACTED]@", text)
    if "://" in text:  # any URL's secret-looking query and fragment parameters, known or not
        text = _URL.sub(lambda m: _parameters_redacted(m.group(0)), text)
    return _AUTH_HEADER.sub(_credential, text)


def _secrets(extra: list[str] | None) -> list[str]:
    return sorted(set(known_keys() + (extra or [])), key=len, reverse=True)


def redact(text: str, extra: list[str] | None = None) -> str:
    """Replace every known secret in ``text`` with ``[REDACTED]`` (see :func:`known_keys`), and any URL password, any
    URL's secret-looking query or fragment parameter and any ``Basic``/``Bearer`` credential, known or not."""
    return _redact_with(text, _secrets(extra))


def redact_all(value: Any, extra: list[str] | None = None) -> Any:
    """``value`` (JSON-like: dicts, lists, strings, numbers) with :func:`redact` applied to every string in it, keys
    of dicts included; for records that are written (transcript lines, cache entries)."""
    secrets = _secrets(extra)

    def walk(v: Any) -> Any:
        if isinstance(v, str):
            return _redact_with(v, secrets)
        if isinstance(v, dict):
            return {walk(k): walk(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [walk(x) for x in v]
        return v

    return walk(value)
