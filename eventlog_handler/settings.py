"""The options of the package: defaults, ``EVENTLOG_*`` environment variables, validation.

Every option can be given as a keyword argument (to :func:`eventlog_handler.setup`, to
:class:`eventlog_handler.EventLogHandler`, or in a ``dictConfig``/``fileConfig`` entry, where
values may arrive as strings). An explicit argument wins over the environment, which wins over
the default. A malformed value raises :class:`ValueError` naming the setting; ``setup()`` says
it on stderr instead and applies the default (:meth:`Settings.usable_options`).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import os
import re
from collections.abc import Iterator, Mapping
from collections.abc import Set as AbstractSet
from typing import Any

from eventlog_handler import _values as checks

# Importable from here, as they always were.
from eventlog_handler._values import MASK as MASK
from eventlog_handler._values import mask_secret as mask_secret
from eventlog_handler._values import shown_url as shown_url
from eventlog_handler._values import url_password as url_password
from eventlog_handler._values import validate_server_url as validate_server_url
from eventlog_handler._values import validate_token as validate_token

#: Where events go when neither ``server_url`` nor ``EVENTLOG_SERVER_URL`` says otherwise:
#: the local collector (``eventlog serve``).
DEFAULT_SERVER_URL = "http://127.0.0.1:5000"

#: Words of keys whose values are replaced by :data:`MASK` wherever they appear in event data
#: (and in ``name=value`` text, see :mod:`eventlog_handler.wire._scrub`). The union of what
#: sentry-python's ``EventScrubber`` denies by default, the header and cookie names the official
#: clients leave out of requests (``Authorization``, ``Proxy-Authorization``, ``Cookie``,
#: ``*SessionId*``, ``.ASPXAUTH``), and card data. A key matches a word when the word ends one of
#: the key's words, or is followed only by a compound suffix such as ``id`` or ``hash``
#: (:func:`eventlog_handler.wire._jsonsafe.is_excluded` has the whole rule): ``db_password``,
#: ``X-Api-Key``, ``accessKey``, ``AUTH_TOKEN`` and ``passwordHash`` match; ``author``,
#: ``authority_count`` and ``tokenizer_name`` do not.
DEFAULT_DATA_EXCLUSIONS: tuple[str, ...] = (
    # passwords and secrets
    "password",
    "passwords",
    "passwd",
    "passphrase",
    "pwd",
    "secret",
    "secrets",
    "credential",
    "credentials",
    "otp",
    # keys and tokens
    "token",
    "apikey",
    "accesskey",
    "privatekey",
    "encryptionkey",
    "signingkey",
    "signature",
    "sig",
    "jwt",
    "bearer",
    # plurals that hold secrets (not ``tokens``: ``total_tokens`` counts them)
    *("apikeys", "accesskeys", "privatekeys", "signingkeys", "encryptionkeys", "signatures"),
    *("accesstokens", "refreshtokens", "apitokens", "jwts"),
    # authentication headers
    "auth",
    "authorization",
    # sessions, cookies and CSRF tokens of the common web frameworks
    "cookie",
    "cookies",
    "session",
    "sessionid",
    "sessid",
    "connectsid",
    "symfony",
    "csrf",
    "xsrf",
    # payment cards
    "card",
    "pan",
    "cc",
    "creditcard",
    "cardnumber",
    "cardno",
    "ccnumber",
    "cvv",
    "cvc",
    "securitycode",
)


ENV_API_KEY = "EVENTLOG_API_KEY"
ENV_SERVER_URL = "EVENTLOG_SERVER_URL"
ENV_USER_TOKEN = "EVENTLOG_USER_TOKEN"
ENV_SPOOL_PATH = "EVENTLOG_SPOOL_PATH"
ENV_VERSION = "EVENTLOG_VERSION"
ENV_ENVIRONMENT = "EVENTLOG_ENVIRONMENT"


@dataclasses.dataclass(frozen=True)
class Settings:
    """Validated options of one delivery engine and its handlers.

    Build one with :meth:`Settings.from_options`, which reads the environment and checks every
    value; the constructor itself checks nothing.
    """

    server_url: str = DEFAULT_SERVER_URL
    api_key: str | None = dataclasses.field(default=None, repr=False)
    #: Seconds to wait for the service to connect and to answer one request.
    timeout: float = 10.0
    #: TLS verification: ``True``, ``False`` or the path of a CA bundle.
    verify: bool | str = True
    #: Events held in memory at most; beyond it the oldest log event is evicted first.
    queue_size: int = 10_000
    #: Bytes held in memory for delivery at most (the queue, the batch in flight, the roll-up's
    #: held events), estimated from what each event carries; beyond it the oldest log event is
    #: evicted first (or written to the spool, when there is one).
    memory_budget: int = 64 * 1024 * 1024  # or less in a container (see container_memory_budget)
    #: Events per request at most.
    batch_size: int = 500
    #: Bytes per request at most, as sent (after gzip). The service refuses more than 200,000.
    max_batch_bytes: int = 200_000
    #: Bytes per request at most before compression (the service allows 10x the sent limit).
    max_raw_batch_bytes: int = 2_000_000
    #: Seconds a log event may wait to fill a batch.
    flush_interval: float = 3.0
    #: Seconds an error event may wait before it is sent.
    error_delay: float = 0.25
    #: Seconds the exit flush may take at interpreter exit.
    shutdown_timeout: float = 2.0
    #: First pause before a retry, in seconds; doubled on each failure up to ``max_backoff``.
    retry_initial: float = 1.0
    #: Longest pause between retries, in seconds.
    max_backoff: float = 300.0
    #: Words of keys whose values are masked in event data (see :data:`DEFAULT_DATA_EXCLUSIONS`).
    data_exclusions: tuple[str, ...] = DEFAULT_DATA_EXCLUSIONS
    #: Tags added to every event.
    tags: tuple[str, ...] = ()
    #: Whether to add ``@environment`` (machine, process, runtime) to error events.
    include_environment: bool = True
    #: A directory for the durable spool (unsent events on disk); ``None``: memory only.
    spool_path: str | None = None
    #: Write every event to the spool before it is sent (survives SIGKILL); otherwise events
    #: go to disk only when they can't be delivered promptly, and at exit.
    spool_all: bool = False
    #: Bytes the spool directory may take at most; past it the oldest logs are evicted first.
    spool_max_bytes: int = 100_000_000
    #: Seconds between looks for spool files of ended processes to replay.
    spool_scan_interval: float = 30.0
    #: The application's version, sent as ``@version`` on every event; by default
    #: ``EVENTLOG_VERSION``, else the version of the distribution that owns ``__main__``.
    version: str | None = None
    #: Fetch the project's settings from the service (``@@log:*`` levels, ``@@error:*``
    #: exclusions, ``@@DataExclusions``) and apply them.
    server_settings: bool = True
    #: Log lines of the same thread or task kept and sent with each error as ``@trace``
    #: (0: none).
    trace_size: int = 25
    #: Seconds in which identical events are sent once, with a ``count`` (0: never rolled up).
    rollup_window: float = 60.0
    #: ``fn(event, hint)`` called on the delivery worker before an event is sent: returns the
    #: event (changed or not), or ``None`` to drop it. A callable or an import path.
    before_send: Any = dataclasses.field(default=None, compare=False)
    #: Loggers (and their children) whose records are never sent.
    ignore_loggers: tuple[str, ...] = ()
    #: Exception types (classes or names, qualified or not) that are never sent.
    ignore_exceptions: tuple[Any, ...] = ()
    #: Seconds a delivery failure lasts before stderr says so (and later that it recovered).
    outage_notice: float = 5.0
    #: Module prefixes whose frames are the application's wherever they are installed (wins
    #: over ``in_app_exclude`` and over the path rules: see :mod:`eventlog_handler.wire._frames`).
    in_app_include: tuple[str, ...] = ()
    #: Module prefixes whose frames are not the application's.
    in_app_exclude: tuple[str, ...] = ()
    #: Send bounded reprs of the locals of the application's frames with each error.
    include_locals: bool = False
    #: The deployment environment (``production``, ``staging``), sent as a tag and as
    #: ``data["environment"]``; by default ``EVENTLOG_ENVIRONMENT``.
    environment: str | None = None
    #: Send sessions as the official clients do: a session start, a heartbeat every
    #: ``heartbeat_interval`` seconds and an end (see :mod:`eventlog_handler.delivery._sessions`).
    sessions: bool = False
    #: Seconds between a session's heartbeats (any positive number).
    heartbeat_interval: float = 60.0
    #: Why nothing can be sent (a missing or malformed key or URL), or ``None``.
    problem: str | None = dataclasses.field(default=None, compare=False)
    #: Whether :meth:`from_options` took ``server_url`` from the default (neither the option
    #: nor ``EVENTLOG_SERVER_URL`` gave it): lines that name the server say "the default" only
    #: then, not when that same URL was given.
    server_url_defaulted: bool = dataclasses.field(default=False, compare=False)
    #: Malformed ``EVENTLOG_*`` variables ignored by a lenient :meth:`from_options` (the
    #: defaults apply in their place), a line each, said on stderr once.
    ignored_environment: tuple[str, ...] = dataclasses.field(default=(), compare=False)

    @property
    def shown_url(self) -> str:
        """The server URL as it may be printed (a password in it masked)."""
        return shown_url(self.server_url)

    @property
    def shown_target(self) -> str:
        """Where events go, as a ``repr`` shows it: the URL, or that nothing is sent and why."""
        if self.problem is not None:  # said on stderr too; a bad URL is not shown
            return f"unconfigured: nothing is sent ({self.problem})"
        return self.shown_url

    @property
    def secrets(self) -> tuple[str, ...]:
        """What must never be printed: the API key, and a password in the server URL (or a
        token in its place: a user without a password, ``https://TOKEN@host``)."""
        password = url_password(self.server_url)
        if password is None:
            token = url_password(self.server_url, "username")
            password = token if token and len(token) >= 8 else None
        return tuple(item for item in (self.api_key, password) if item)

    def __repr__(self) -> str:
        return (
            f"Settings(server_url={self.shown_url!r}, api_key={mask_secret(self.api_key)!r}, "
            f"queue_size={self.queue_size}, batch_size={self.batch_size})"
        )

    @functools.cached_property
    def engine_key(self) -> tuple[str, str]:
        """What makes two settings share one delivery engine: the server and the key."""
        return (self.server_url, self.api_key or "")

    @classmethod
    def from_options(
        cls,
        options: Mapping[str, Any] | None = None,
        *,
        environ: Mapping[str, str] | None = None,
        require_api_key: bool = True,
        lenient: bool = False,
    ) -> Settings:
        """Merge ``options`` over the environment over the defaults, and validate.

        ``None`` values in ``options`` count as absent. Unknown option names are a
        :class:`TypeError`, like an unknown keyword argument; a malformed value a
        :class:`ValueError` naming it. With ``lenient``, a missing or malformed ``api_key`` or
        ``server_url`` (often the environment of a machine, not the program) is not raised: the
        settings come back with :attr:`problem` saying what is wrong, and nothing is sent; nor
        is a malformed value of another ``EVENTLOG_*`` variable: it is ignored, the default
        applies, and :attr:`ignored_environment` says so.
        """
        env = os.environ if environ is None else environ
        given = {key: value for key, value in (options or {}).items() if value is not None}
        known = OPTION_NAMES
        unknown = sorted(set(given) - known)
        if unknown:
            raise TypeError(_unknown_options(unknown, known))
        from_environment: dict[str, str] = {}
        for name, variable in _ENVIRONMENT.items():
            if name not in given and env.get(variable):
                given[name] = env[variable]
                from_environment[name] = variable
        if "memory_budget" not in given:
            budget = container_memory_budget()
            if budget is not None:
                given["memory_budget"] = budget
        values: dict[str, Any] = {}
        problems: list[str] = []
        ignored: list[str] = []
        for field in dataclasses.fields(cls):
            if field.name in given:
                try:
                    values[field.name] = checks.checked(
                        _CONVERTERS[field.name], field.name, given[field.name]
                    )
                except ValueError as exc:
                    said = str(exc).removeprefix("eventlog_handler: ")
                    if lenient and field.name in _CONNECTION:
                        if field.name in from_environment:  # else given in code
                            said = f"{from_environment[field.name]}: {said}"
                        problems.append(said)
                    elif lenient and field.name in from_environment:
                        ignored.append(
                            f"{from_environment[field.name]}: {said}; "
                            f"the default ({_shown_default(field.default)}) is used"
                        )
                    else:
                        raise
        if ignored:
            values["ignored_environment"] = tuple(ignored)
        if "server_url" not in given:
            values["server_url_defaulted"] = True
        if require_api_key and not values.get("api_key") and not problems:
            missing = (
                "eventlog_handler: setting 'api_key' is missing: pass api_key=... "
                f"or set {ENV_API_KEY} (a project token of the service)"
            )
            if not lenient:
                raise ValueError(missing)
            problems.append(f"{_CONNECTION['api_key']}: no API key is set")
        if problems:
            values["problem"] = "; ".join(problems)
        return cls(**values)

    @classmethod
    def usable_options(cls, options: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
        """``options`` without the unknown and the malformed ones, and a line naming each of
        those (the defaults apply in their place). ``api_key`` and ``server_url`` are kept as
        given: :meth:`from_options` with ``lenient`` says what is wrong with them."""
        known = OPTION_NAMES
        usable: dict[str, Any] = {}
        said: list[str] = []
        unknown = sorted(name for name in options if name not in known)
        if unknown:
            said.append(f"{_unknown_options(unknown, known)}: ignored")
        defaults = cls()
        for name, value in options.items():
            if name not in known:
                continue
            try:
                if isinstance(value, Iterator):  # a generator: checking it would use it up
                    value = checks.checked(lambda _, items: tuple(items), name, value)
                if value is not None and name not in _CONNECTION:
                    checks.checked(_CONVERTERS[name], name, value)
            except ValueError as exc:
                said.append(
                    f"{exc}; the default ({_shown_default(getattr(defaults, name))}) is used"
                )
                continue
            usable[name] = value
        return usable, said


def _shown_default(value: Any) -> str:
    """A default as a line shows it: a long list by its first words (the data exclusions)."""
    if isinstance(value, tuple) and len(value) > 5:
        return f"{', '.join(map(repr, value[:3]))} and {len(value) - 3} more"
    return repr(value)


#: Names other libraries give an option that is this package's (none of them close in
#: spelling): ``requests``' and ``ssl``'s CA bundle is ``verify`` here.
_MEANT = {
    name: ["verify"]
    for name in ("ca_bundle", "cafile", "ca_file", "ca_certs", "ca_path", "capath", "cert_reqs")
} | {name: ["verify"] for name in ("ssl_verify", "verify_ssl", "tls_verify", "verify_tls")}


def _unknown_options(unknown: list[str], known: AbstractSet[str]) -> str:
    """Names the unknown options, each with the known option closest to it, if one is close."""
    close = {
        n: _MEANT.get(n.lower()) or difflib.get_close_matches(n, sorted(known), 1, 0.8)
        for n in unknown
    }
    said = ", ".join(f"{n} (did you mean {c[0]}?)" if c else n for n, c in close.items())
    return f"eventlog_handler: unknown option(s): {said}"


def _exclusions(name: str, value: Any) -> tuple[str, ...]:
    return tuple(normalize_key(word) for word in checks.words(name, value))


def normalize_key(key: str) -> str:
    """The form of a data key (or of an exclusion) that exclusions are matched in: lower case,
    letters, digits and ``*`` wildcards only (``X-Api_Key`` → ``xapikey``)."""
    return _NOT_KEY_CHARS.sub("", key.lower())


_NOT_KEY_CHARS = re.compile(r"[^\w*]|_")


#: The settings that say where to send and with which key, and where they usually come from.
@functools.lru_cache(maxsize=1)
def container_memory_budget() -> int | None:
    """The default ``memory_budget`` in a memory-limited cgroup (a container with ``--memory``,
    a Kubernetes limit): an eighth of the limit, at most the usual 64 MiB and at least 2 MiB;
    ``None`` without a limit (or where none can be read). The process holds more than the
    estimate of what it queues (the allocator's and the interpreter's share): 64 MiB would fill
    a small container, and its program would be killed for memory the events took."""
    limit = _cgroup_memory_limit()
    if limit is None:
        return None
    return max(2 * 1024 * 1024, min(Settings.memory_budget, limit // 8))


def _cgroup_memory_limit() -> int | None:
    """The memory limit of this process's cgroup in bytes (v2 ``memory.max``, v1
    ``memory.limit_in_bytes``), or ``None``."""
    try:
        with open("/proc/self/cgroup", encoding="ascii") as lines:
            groups = [line.rstrip("\n").split(":", 2) for line in lines]
    except (OSError, ValueError):
        return None
    candidates: list[str] = []
    for parts in groups:
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        path = path.lstrip("/")
        if controllers == "":  # v2
            candidates += [f"/sys/fs/cgroup/{path}/memory.max", "/sys/fs/cgroup/memory.max"]
        elif "memory" in controllers.split(","):  # v1
            base = "/sys/fs/cgroup/memory"
            candidates += [f"{base}/{path}/memory.limit_in_bytes", f"{base}/memory.limit_in_bytes"]
    for candidate in candidates:
        try:
            with open(candidate, encoding="ascii") as file:
                text = file.read().strip()
        except (OSError, ValueError):
            continue
        if text == "max":
            return None
        try:
            limit = int(text)
        except ValueError:
            return None
        return limit if 0 < limit < 2**60 else None  # v1 says "unlimited" with a huge number
    return None


#: What :class:`Settings` says of itself, not options a program gives.
_NOT_OPTIONS = frozenset({"problem", "ignored_environment", "server_url_defaulted"})
#: The names of the options (the keyword arguments of ``setup()`` and the handler).
OPTION_NAMES = frozenset(
    field.name for field in dataclasses.fields(Settings) if field.name not in _NOT_OPTIONS
)

#: The options the environment may give, and their variables.
_ENVIRONMENT = {
    "server_url": ENV_SERVER_URL,
    "api_key": ENV_API_KEY,
    "spool_path": ENV_SPOOL_PATH,
    "version": ENV_VERSION,
    "environment": ENV_ENVIRONMENT,
}

_CONNECTION = {
    "api_key": f"{ENV_API_KEY} (api_key)",
    "server_url": f"{ENV_SERVER_URL} (server_url)",
}

_CONVERTERS: dict[str, Any] = {
    "server_url": validate_server_url,
    "api_key": validate_token,
    "timeout": lambda n, v: checks.seconds(n, v, minimum=0.001),
    "verify": checks.ca_bundle,
    "queue_size": lambda n, v: checks.number(n, v, minimum=1, integer=True),
    "memory_budget": lambda n, v: checks.number(n, v, minimum=1_000_000, integer=True),
    "batch_size": lambda n, v: checks.number(n, v, minimum=1, integer=True),
    "max_batch_bytes": lambda n, v: checks.number(n, v, minimum=1024, integer=True),
    "max_raw_batch_bytes": lambda n, v: checks.number(n, v, minimum=1024, integer=True),
    "flush_interval": lambda n, v: checks.seconds(n, v, minimum=0.001),
    "error_delay": lambda n, v: checks.seconds(n, v, minimum=0),
    "shutdown_timeout": lambda n, v: checks.seconds(n, v, minimum=0),
    "retry_initial": lambda n, v: checks.seconds(n, v, minimum=0.001),
    "max_backoff": lambda n, v: checks.seconds(n, v, minimum=0.001),
    "spool_path": checks.directory,
    "spool_all": checks.boolean,
    "spool_max_bytes": lambda n, v: checks.number(n, v, minimum=100_000, integer=True),
    "spool_scan_interval": lambda n, v: checks.seconds(n, v, minimum=0.01),
    "data_exclusions": _exclusions,
    "tags": checks.tags,
    "include_environment": checks.boolean,
    "version": checks.version,
    "server_settings": checks.boolean,
    "trace_size": lambda n, v: checks.number(n, v, minimum=0, integer=True),
    "rollup_window": lambda n, v: checks.seconds(n, v, minimum=0),
    "before_send": checks.import_callable,
    "ignore_loggers": checks.words,
    "ignore_exceptions": checks.exception_types,
    "outage_notice": lambda n, v: checks.seconds(n, v, minimum=0),
    "in_app_include": checks.modules,
    "in_app_exclude": checks.modules,
    "include_locals": checks.boolean,
    "environment": checks.environment,
    "sessions": checks.boolean,
    "heartbeat_interval": lambda n, v: checks.seconds(n, v, minimum=1),
}
