"""What a ``.env`` file may set, and how its names are shown.

A ``.env`` sits in a working folder, which may be a cloned repository or an unpacked archive: it is someone else's
file as often as the user's own. Its providers' keys and URLs, ``RAY_ADDRESS``, ``XDG_CACHE_HOME`` and the like are
what it is for. What it must not set is a variable that decides which code a process runs when it starts, because
every process this package starts inherits it (``compare``'s workers, its limits manager and multiprocessing's
resource tracker are new Python interpreters): ``PYTHONPATH=.`` beside a ``sitecustomize.py`` would run that file in
each of them. Such a ``.env`` is refused whole, before it sets anything (:func:`check_names`); the shell may still
set these variables, which is the user's own choice.

The refused names (:data:`REFUSED_PREFIXES`, :data:`REFUSED_NAMES`), by what they decide:

* the Python interpreter: every ``PYTHON*`` variable (``PYTHONPATH``, ``PYTHONHOME``, ``PYTHONSTARTUP``,
  ``PYTHONINSPECT``, ``PYTHONBREAKPOINT``, ``PYTHONUSERBASE``, ``PYTHONWARNINGS``, ...), and the start-up hooks of
  coverage's ``.pth`` file (``COVERAGE_PROCESS_START``, ``COV_CORE_*``), which import a configured plug-in;
* the dynamic loader and the C library: ``LD_*`` (glibc, musl), ``DYLD_*`` (macOS), and the variables glibc
  itself ignores in programs that run with raised privileges for this reason (``unsecvars.h``): ``GCONV_PATH``,
  ``GETCONF_DIR``, ``GLIBC_TUNABLES``, ``HOSTALIASES``, ``LOCALDOMAIN``, ``LOCPATH``, ``MALLOC_*``, ``NIS_PATH``,
  ``NLSPATH``, ``RESOLV_HOST_CONF``, ``RES_OPTIONS``, ``TMPDIR``, ``TZDIR``;
* which program runs, and shells' start-up code: ``PATH`` (and Windows' ``PATHEXT``, ``COMSPEC``), ``BASH_ENV``,
  ``ENV``, ``IFS``, ``SHELLOPTS``, ``BASHOPTS``, ``PS4``, ``PROMPT_COMMAND``, exported functions (``BASH_FUNC_*``);
* other interpreters a library may start: ``PERL5OPT``, ``PERL5LIB``, ``PERLLIB``, ``PERL5DB``, ``RUBYOPT``,
  ``RUBYLIB``, ``NODE_OPTIONS``, ``NODE_PATH``, ``JAVA_TOOL_OPTIONS``, ``_JAVA_OPTIONS``, ``JDK_JAVA_OPTIONS``,
  ``CLASSPATH``.

Names are compared as written (environment variables are case-sensitive on the systems this runs on), and also
upper-cased, so that ``path`` is refused on Windows, where it is ``PATH``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..errors import UserError

__all__ = ["REFUSED_PREFIXES", "REFUSED_NAMES", "refused_because", "check_names", "read_env_file", "shown_name"]

_PYTHON = "what Python runs when it starts"
_LOADER = "how the system's loader and C library start a program"
_SHELL = "which program or shell start-up code runs"
_OTHER = "what another interpreter runs when it starts"

REFUSED_PREFIXES: dict[str, str] = {"PYTHON": _PYTHON, "COV_CORE_": _PYTHON, "LD_": _LOADER, "DYLD_": _LOADER,
                                    "MALLOC_": _LOADER, "BASH_FUNC_": _SHELL}
"""Name prefixes a ``.env`` must not set -> what such a variable decides."""

REFUSED_NAMES: dict[str, str] = {
    **dict.fromkeys(("COVERAGE_PROCESS_START",), _PYTHON),
    **dict.fromkeys(("GCONV_PATH", "GETCONF_DIR", "GLIBC_TUNABLES", "HOSTALIASES", "LOCALDOMAIN", "LOCPATH",
                     "NIS_PATH", "NLSPATH", "RESOLV_HOST_CONF", "RES_OPTIONS", "TMPDIR", "TZDIR"), _LOADER),
    **dict.fromkeys(("PATH", "PATHEXT", "COMSPEC", "BASH_ENV", "ENV", "IFS", "SHELLOPTS", "BASHOPTS", "PS4",
                     "PROMPT_COMMAND"), _SHELL),
    **dict.fromkeys(("PERL5OPT", "PERL5LIB", "PERLLIB", "PERL5DB", "RUBYOPT", "RUBYLIB", "NODE_OPTIONS", "NODE_PATH",
                     "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "CLASSPATH"), _OTHER),
}
"""Names a ``.env`` must not set -> what the variable decides."""

_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")


def shown_name(name: str) -> str:
    """``name`` as the console shows it: as it is when it is a plain variable name, else its ``repr`` (quoted, every
    control, escape or bidi character written as its escape), so that a name cannot move the cursor or reorder text."""
    from ..loggers.console import printable

    return name if _PLAIN.fullmatch(name) else printable(repr(name))


def refused_because(name: str) -> str | None:
    """What the variable ``name`` decides when a ``.env`` must not set it (see the module docstring); else None."""
    for n in dict.fromkeys((name, name.upper())):
        if n in REFUSED_NAMES:
            return REFUSED_NAMES[n]
        for prefix, why in REFUSED_PREFIXES.items():
            if n.startswith(prefix):
                return why
    return None


def check_names(values: dict[str, str | None], where: str) -> None:
    """Refuse a ``.env`` (``where``: its path) that sets a variable of the denylist, or one whose name or value the
    environment cannot hold; nothing has been set yet when this raises.

    Raises:
        UserError: naming the first such variable (escaped) and what to do.
    """
    from ..loggers.console import printable

    shown_where = printable(where)
    for name, value in values.items():
        if value is None:  # a bare NAME line sets nothing
            continue
        why = refused_because(name)
        if why is not None:
            raise UserError(f"{shown_where} sets {shown_name(name)}, which decides {why}: a .env may set keys, base "
                            "URLs and the like, never such a variable (every process this command starts would "
                            "inherit it); remove that line, or set the variable in the shell if you mean it")
        if not name or "=" in name or "\0" in name or "\0" in value:
            raise UserError(f"{shown_where}: the variable {shown_name(name)} cannot be set (an empty name, '=' in "
                            "the name, or a NUL character); fix or remove that line")


def read_env_file(target: Path) -> dict[str, str | None]:
    """The variables of the ``.env`` file ``target`` as ``load_dotenv(target, override=False)`` would set them (its
    ``${VAR}`` references resolved the same way), read as UTF-8.

    Raises:
        UserError: the file cannot be read, or is not UTF-8 text.
    """
    from dotenv.main import DotEnv

    try:
        return dict(DotEnv(target, interpolate=True, override=False, encoding="utf-8").dict())
    except (OSError, UnicodeDecodeError) as exc:
        from ..loggers.console import printable

        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise UserError(f"{printable(os.fspath(target))} cannot be read as a .env file ({reason}); fix it, or "
                        "set LLM_POLICY_GEN_NO_DOTENV=1 to skip it") from None
