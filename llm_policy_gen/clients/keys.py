"""API keys: where they come from, and how they are kept out of every log.

Keys are read only from the process environment, which :func:`load_env` fills from the ``.env`` file of the working
folder (python-dotenv; never a parent folder's, never overriding variables already set; the console names the
variables it set; a ``.env`` that sets a variable deciding which code a process runs at start is refused whole, see
:mod:`.envfile`). A key goes only to a base URL set in the same place (:func:`check_same_source`). A key is never a
command-line option, never written to config.json, transcripts or error messages: :func:`redact` removes every known
key value from a text, and every URL's ``user:password@`` and secret-looking query or fragment parameters.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

__all__ = ["load_env", "load_env_noted", "env_notice", "check_same_source", "first_value", "register_key_variables",
           "redact", "known_keys", "redact_all", "remember_url", "url_secrets", "variable_source", "without_userinfo",
           "is_loopback_url", "http_url_problem", "secret_parameter"]

#: Every provider's key variables (each client class adds its own when it is defined, see
#: :meth:`~.sdk.SDKClient.__init_subclass__`): their values are redacted, whatever the variable's name.
_KEY_VARIABLES: set[str] = set()


def register_key_variables(names: tuple[str, ...] | list[str]) -> None:
    """Redact the values of the variables ``names`` from everything written from now on (a provider's keys)."""
    _KEY_VARIABLES.update(names)


def load_env(path: str | os.PathLike[str] | None = None) -> list[str]:
    """Load ``path``, else ``.env`` of the working folder (never a parent folder's: an ancestor such as the system's
    temporary folder may be anyone's), without overriding set variables; returns the names it set, sorted.

    ``LLM_POLICY_GEN_NO_DOTENV=1`` disables it (the test suite sets it so that a developer's keys are never used).

    Raises:
        UserError: the file sets a variable that decides which code a process runs when it starts (``PYTHONPATH``,
            ``LD_PRELOAD``, ``PATH``, ...: :mod:`.envfile`), or cannot be read; nothing is set then.
    """
    from .envfile import check_names, read_env_file

    if os.environ.get("LLM_POLICY_GEN_NO_DOTENV") == "1":
        return []
    target = Path(path) if path is not None else Path.cwd() / ".env"
    if not target.is_file():
        return []
    values = read_env_file(target)
    where = str(target.resolve())
    check_names(values, where)
    added = []
    for name, value in values.items():  # as load_dotenv(override=False): a variable already set is kept
        if value is not None and name not in os.environ:
            os.environ[name] = value
            _DOTENV_SOURCES[name] = where
            added.append(name)
    return sorted(added)


def env_notice(names: list[str], path: str | os.PathLike[str] | None = None) -> str | None:
    """The console line saying which variables (names, never values; a name that is not plain shown escaped, see
    :func:`.envfile.shown_name`) :func:`load_env` set; None when none."""
    if not names:
        return None
    from ..loggers.console import printable
    from .envfile import shown_name

    where = printable(os.fspath(path if path is not None else Path(".env")))
    return f"note: {where} set {', '.join(shown_name(n) for n in names)} (variables already set are kept)"


#: Variable -> the ``.env`` file :func:`load_env` took it from (variables not listed came from the shell).
_DOTENV_SOURCES: dict[str, str] = {}


def variable_source(name: str) -> str:
    """Where the variable ``name`` came from: ``"the .env file PATH"`` or ``"the shell environment"``."""
    where = _DOTENV_SOURCES.get(name)
    if where is not None and name in os.environ:
        return f"the .env file {where}"
    return "the shell environment"


def load_env_noted(path: str | os.PathLike[str] | None = None) -> list[str]:
    """:func:`load_env`, then the line of :func:`env_notice` on stderr (what the commands that call a model do)."""
    import sys

    names = load_env(path)
    line = env_notice(names, path)
    if line:
        try:
            print(line, file=sys.stderr, flush=True)
        except OSError:  # a reader that went away
            pass
    return names


def check_same_source(key_variable: str, url_variable: str | None, url_from_option: bool) -> None:
    """Refuse to send the key of ``key_variable`` to the base URL of ``url_variable`` when the two were set in
    different places (the shell, a ``.env`` file): a ``.env`` of a cloned repository (or a planted one) must not
    redirect the shell's key. A URL given with ``--base-url`` (``url_from_option``) is the user's own choice.

    Raises:
        BackendConfigError: naming both variables and where each came from.
    """
    from ..errors import BackendConfigError

    if url_from_option or not url_variable or not key_variable:
        return
    if not os.environ.get(key_variable, "").strip() or not os.environ.get(url_variable, "").strip():
        return
    key_from, url_from = variable_source(key_variable), variable_source(url_variable)
    if key_from != url_from:
        raise BackendConfigError(
            f"refused to send {key_variable} (from {key_from}) to {url_variable} (from {url_from}): a key goes only "
            f"to a base URL set in the same place; set both in the shell or both in one .env, or give the URL with "
            "--base-url")


def endpoint_notice(label: str, base_url: str, from_option: bool, url_variable: str, key_name: str) -> str:
    """The console line a run prints before its first call: where the calls go, and where that base URL and the key
    came from (``--base-url``, or the variable and whether the shell or which ``.env`` file set it)."""
    if from_option:
        url_from = "the base_url setting (--base-url)"
    elif url_variable and os.environ.get(url_variable, "").strip():
        url_from = f"{url_variable} from {variable_source(url_variable)}"
    else:
        url_from = "the provider's default"
    if key_name and os.environ.get(key_name, "").strip():
        key = f"key {key_name} from {variable_source(key_name)}"
    else:
        key = "no key sent"
    return f"{label}: calls go to {redact(without_userinfo(base_url))} (base URL: {url_from}; {key})"


def first_value(names: tuple[str, ...] | list[str]) -> str | None:
    """The value of the first variable of ``names`` set to something not blank, stripped; else None."""
    for name in names:
        value = os.environ.get(name, "").strip()
        if value:
            return value
    return None


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


def http_url_problem(url: str) -> str | None:
    """Why ``url`` cannot be a base URL calls are sent to (not ``http://`` or ``https://``, no host, a bad port);
    None when it can."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url.strip())
        host, _ = parts.hostname, parts.port
    except ValueError as exc:
        return f"not a URL ({exc})"
    if parts.scheme.lower() not in ("http", "https"):
        return "it does not start with http:// or https://"
    if not host:
        return "it names no host"
    return None


def is_loopback_url(url: str) -> bool:
    """True when ``url``'s host is this machine (``localhost``, 127.0.0.0/8, ``::1``)."""
    import ipaddress
    from urllib.parse import urlsplit

    try:
        host = urlsplit(url.strip()).hostname or ""
    except ValueError:
        return False
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


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
