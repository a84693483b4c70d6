"""The ``eventlog`` command.

::

    eventlog demo [--keep-serving]          see the package work against a local collector
    eventlog serve [--port 5000] [--db F]   run the local collector
    eventlog login [--email E] [--export]   log in; prints a session token
    eventlog projects [--json]              list the projects of a user token
    eventlog token create PROJECT_ID [--scope client|user]
    eventlog settings get [PROJECT_ID]      a project's settings (@@log:*, @@error:*, ...)
    eventlog settings set PROJECT_ID KEY VALUE
    eventlog settings delete PROJECT_ID KEY
    eventlog send MESSAGE [--level L]       post one event with a project token (API key)

Settings come from flags or from ``EVENTLOG_SERVER_URL``, ``EVENTLOG_USER_TOKEN`` and
``EVENTLOG_API_KEY``. A password is never a flag: ``eventlog login`` asks for it, or reads the
first line of stdin when stdin is not a terminal. Every failure is one line on stderr and a
non-zero exit, never a traceback.
"""

from __future__ import annotations

import argparse
import getpass
import json
import math
import os
import shlex
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from eventlog_handler._version import __version__
from eventlog_handler.api import _errors as errors
from eventlog_handler.api._client import (
    TOKEN_AUTH_CANNOT_CREATE,
    Client,
    IncompleteListWarning,
    InsecureTransportWarning,
    TokenCreationRefusedError,
)
from eventlog_handler.cli._table import format_table
from eventlog_handler.settings import (
    DEFAULT_SERVER_URL,
    ENV_API_KEY,
    ENV_SERVER_URL,
    ENV_USER_TOKEN,
)
from eventlog_handler.wire._events import LEVELS
from eventlog_handler.wire._logs import log_event
from eventlog_handler.wire._scrub import Scrubber

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
#: As a tool killed by SIGPIPE when its reader went away (128 + 13).
EXIT_BROKEN_PIPE = 141


class CommandError(Exception):
    """A failure to report as one line on stderr."""


def _server_url(args: argparse.Namespace) -> str:
    return str(args.server_url or os.environ.get(ENV_SERVER_URL) or DEFAULT_SERVER_URL)


def _client(
    args: argparse.Namespace, token: str | None, env_name: str = "", flag: str = ""
) -> Client:
    """A client of ``--server-url``; ``token`` is required unless ``env_name`` is empty."""
    if not token and env_name:
        raise CommandError(f"no token: pass {flag} or set {env_name}")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", InsecureTransportWarning)
        try:
            client = Client(_server_url(args), token or None, timeout=args.timeout)
        except ValueError as exc:
            text = str(exc)
            if flag and "setting 'token'" in text:  # the client's word for it: name the flag
                text = text.replace("setting 'token'", f"the token ({flag} or {env_name})")
            raise CommandError(text) from None
    for warning in caught:
        text = str(warning.message).removeprefix("eventlog_handler: ")
        print(f"eventlog: warning: {text}", file=sys.stderr)
    return client


def _user_client(args: argparse.Namespace) -> Client:
    token = args.token or os.environ.get(ENV_USER_TOKEN)
    return _client(args, token, ENV_USER_TOKEN, "--token")


# -- commands -------------------------------------------------------------------------------


def _warn(text: str) -> None:
    print(f"eventlog: warning: {text}", file=sys.stderr)


def cmd_projects(args: argparse.Namespace) -> int:
    client = _user_client(args)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", IncompleteListWarning)
        projects = client.list_projects()
    for warning in caught:
        if isinstance(warning.message, IncompleteListWarning):
            missing = warning.message.total - warning.message.received
            _warn(
                f"the server counts {warning.message.total} projects but gave "
                f"{warning.message.received}: {missing} are missing (the server serves no "
                "page past 1,000 rows)"
            )
    if args.json:
        rows = [
            {
                "id": project.id,
                "name": project.name,
                "organization_id": project.organization_id,
                "organization_name": project.organization_name,
                "created_utc": project.created_utc.isoformat() if project.created_utc else None,
                "event_count": project.event_count,
                "stack_count": project.stack_count,
            }
            for project in projects
        ]
        print(json.dumps(rows, indent=2))
        return EXIT_OK
    table = [("ID", "NAME", "ORGANIZATION", "EVENTS", "CREATED")]
    for project in projects:
        created = project.created_utc.strftime("%Y-%m-%d %H:%M") if project.created_utc else ""
        table.append(
            (
                project.id,
                project.name,
                project.organization_name,
                str(project.event_count),
                created,
            )
        )
    print(format_table(table))
    print(f"{len(projects)} project(s)")
    return EXIT_OK


def cmd_token_create(args: argparse.Namespace) -> int:
    try:
        token = _user_client(args).create_token(args.project_id, scopes=[args.scope])
    except TokenCreationRefusedError as exc:
        if exc.title == TOKEN_AUTH_CANNOT_CREATE:
            raise CommandError(
                f"the server creates tokens only for a login session ({exc.status} {exc.title}): "
                f"run `eventlog login` and use the token it prints as {ENV_USER_TOKEN}"
            ) from None
        raise CommandError(
            f"the token lacks the scope to create tokens ({exc.status} {exc.title or ''}): use "
            f"a user-scoped token, or run `eventlog login` and use the session token it prints "
            f"as {ENV_USER_TOKEN}"
        ) from None
    if args.json:
        print(json.dumps({"id": token.id, "project_id": token.project_id, "scopes": token.scopes}))
    else:
        print(token.id)
        print(
            f"project {token.project_id}, scopes {', '.join(token.scopes)}",
            file=sys.stderr,
        )
    return EXIT_OK


def cmd_login(args: argparse.Namespace) -> int:
    client = _client(args, None)
    interactive = _is_terminal(sys.stdin)
    email = (args.email or "").strip()
    if not email:
        if not interactive:
            raise CommandError("no email address: pass --email (stdin is read for the password)")
        email = _prompt("Email: ").strip()
        if not email:
            raise CommandError("no email address given")
    password = _read_password(interactive)
    if not password:
        raise CommandError("no password given (it is read from a prompt, or from stdin)")
    try:
        token = client.login(email, password)
    except errors.AuthenticationError:
        raise CommandError(
            f"login refused for {email}: wrong email or password (after repeated failures the "
            "server refuses the account's logins for a while, the right password too: the local "
            "collector after 10 failures in 15 minutes)"
        ) from None
    except errors.RateLimitedError as exc:
        raise CommandError(
            f"logins of {email} are refused for now ({exc.status}): too many failed logins; "
            f"{_retry_when(exc.retry_after)}"
        ) from None
    if args.export:
        print(f"export {ENV_USER_TOKEN}={shlex.quote(token)}")
    else:
        print(token)
        print(f"logged in as {email}: use this session token as {ENV_USER_TOKEN}", file=sys.stderr)
    return EXIT_OK


def _retry_when(seconds: float | None) -> str:
    """When to try again, from the server's ``Retry-After`` (in seconds), said for a person."""
    if seconds is None:
        return "try again later (the server said not when)"
    wait = max(1, math.ceil(seconds))
    if wait < 120:
        return f"try again in {wait} s"
    minutes = math.ceil(wait / 60)
    return f"try again in {minutes} minutes ({wait} s)"


def _read_password(interactive: bool) -> str:
    if interactive:
        return getpass.getpass("Password: ")
    return sys.stdin.readline().rstrip("\r\n")


def _is_terminal(stream: TextIO | None) -> bool:
    try:
        return stream is not None and stream.isatty()
    except (ValueError, OSError):
        return False


def _prompt(text: str) -> str:
    print(text, end="", file=sys.stderr, flush=True)
    line = sys.stdin.readline()
    if not line:
        raise CommandError("no email address given")
    return line


#: What the settings of a project mean to this package.
SETTINGS_HELP = """\
settings the package applies (others are stored and shown):
  @@log:<source>         lowest level sent for a logger, e.g. @@log:shop.* = Warn
                         (Trace, Debug, Info, Warn, Error, Fatal, or Off to send none);
                         the exact source wins, then the most specific wildcard
  @@error:<type>         false (or off) drops errors of that type, e.g. @@error:*Timeout*
  @@DataExclusions       comma-separated key patterns masked in data, e.g. *card*,ssn
"""
_LOG_VALUES = {level.lower() for level in LEVELS} | {"off", "false", "true", "warning", "none"}
_BOOLEAN_VALUES = {"true", "false", "on", "off", "yes", "no", "1", "0"}


def cmd_settings_get(args: argparse.Namespace) -> int:
    if args.project_id:
        config = _user_client(args).project_config(args.project_id)
    else:
        api_key = args.api_key or os.environ.get(ENV_API_KEY)
        if not api_key:
            raise CommandError(
                f"pass a PROJECT_ID (with a user token), or --api-key or {ENV_API_KEY} "
                "for the project of that key"
            )
        config = _client(args, api_key, ENV_API_KEY, "--api-key").project_config()
    if args.json:
        print(json.dumps({"version": config.version, "settings": config.settings}, indent=2))
        return EXIT_OK
    if config.settings:
        rows = [("KEY", "VALUE"), *sorted(config.settings.items())]
        print(format_table(rows))
    print(f"{len(config.settings)} setting(s), version {config.version}")
    return EXIT_OK


def cmd_settings_set(args: argparse.Namespace) -> int:
    key, value = args.key.strip(), args.value.strip()
    _user_client(args).set_project_setting(args.project_id, key, value)
    print(f"set {key} = {value}")
    _check_setting(key, value)
    return EXIT_OK


def cmd_settings_delete(args: argparse.Namespace) -> int:
    key = args.key.strip()
    client = _user_client(args)
    if key not in client.project_config(args.project_id).settings:  # a typo deletes nothing
        print(f"{key} is not set: nothing deleted")
        return EXIT_OK
    client.delete_project_setting(args.project_id, key)
    print(f"deleted {key}")
    return EXIT_OK


def _check_setting(key: str, value: str) -> None:
    """A warning line for a value the package will not understand (it is still stored)."""
    lowered = key.lower()
    if lowered.startswith(("log:", "error:", "dataexclusions", "@log:", "@error:", "@dataexcl")):
        _warn(f"{key} is stored, but the package reads @@{key.lstrip('@')}")
    elif lowered.startswith("@@log:"):
        if value.lower() not in _LOG_VALUES:
            _warn(f"{value!r} is not a level: {key} takes {', '.join(LEVELS)} or Off (stored)")
    elif lowered.startswith("@@") and ":" in lowered and value.lower() not in _BOOLEAN_VALUES:
        _warn(f"{key} takes true or false (stored)")


def cmd_send(args: argparse.Namespace) -> int:
    api_key = args.api_key or os.environ.get(ENV_API_KEY)
    client = _client(args, api_key, ENV_API_KEY, "--api-key")
    level = _level(args.level)
    if not args.message.strip():
        raise CommandError("the message is empty: give the text of the event to send")
    event = log_event(args.message, level=level, source=args.source, tags=args.tag or ())
    if args.type == "error":
        event["type"] = "error"
    # Masked as the handler masks what a program logs: a script's "$ERR" may quote a secret.
    client.submit(Scrubber((api_key,)).event(event))
    print(f"sent {event['type']} event {event['reference_id']}")
    return EXIT_OK


def _level(name: str) -> str:
    for level in LEVELS:
        if level.lower() == name.lower() or (name.lower() == "warning" and level == "Warn"):
            return level
    if name.lower() == "critical":
        return "Fatal"
    raise CommandError(f"unknown level {name!r}: use one of {', '.join(LEVELS)}")


def cmd_serve(args: argparse.Namespace) -> int:
    from eventlog_handler.collector._cli import run_serve

    return run_serve(args)


def cmd_tail(args: argparse.Namespace) -> int:
    from eventlog_handler.cli._tail import run_tail

    return run_tail(
        _user_client(args),
        errors_only=args.errors,
        filter_text=args.filter or "",
        interval=args.interval,
        last=args.last,
    )


def cmd_demo(args: argparse.Namespace) -> int:
    from eventlog_handler.cli._demo import run_demo

    return run_demo(keep_serving=args.keep_serving, port=args.port)


# -- parser ---------------------------------------------------------------------------------


def _timeout(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not math.isfinite(value) or not 0 < value <= 3600:
        raise argparse.ArgumentTypeError(
            f"must be more than 0 and at most 3600 seconds, got {text!r}"
        )
    return value


def _last(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 0 <= value <= 1000:
        raise argparse.ArgumentTypeError(
            f"must be between 0 and 1000 (the events the service's paging reaches), got {text!r}"
        )
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="eventlog", description="Send and inspect events of an event collection service."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--server-url",
        help=f"service base URL (default: ${ENV_SERVER_URL} or {DEFAULT_SERVER_URL})",
    )
    common.add_argument("--timeout", type=_timeout, default=10.0, help="seconds per request")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    login = sub.add_parser(
        "login",
        parents=[common],
        help="log in and print a session token",
        description=(
            "Log in with an email address and password (POST /api/v2/auth/login) and print "
            "a session token for EVENTLOG_USER_TOKEN. On the real server only such a token "
            "may create project tokens. The password is asked for, or read from the first "
            "line of stdin when stdin is not a terminal; it is never a flag."
        ),
    )
    login.add_argument("--email", help="the account's email address (asked for if missing)")
    login.add_argument(
        "--export",
        action="store_true",
        help=f"print an `export {ENV_USER_TOKEN}=...` line (for eval)",
    )
    login.set_defaults(func=cmd_login)

    projects = sub.add_parser("projects", parents=[common], help="list your projects")
    projects.add_argument("--token", help=f"user-scoped token (default: ${ENV_USER_TOKEN})")
    projects.add_argument("--json", action="store_true", help="print JSON instead of a table")
    projects.set_defaults(func=cmd_projects)

    token = sub.add_parser("token", help="project tokens (API keys)")
    token_sub = token.add_subparsers(dest="token_command", metavar="{create}", required=True)
    create = token_sub.add_parser("create", parents=[common], help="generate a project token")
    create.add_argument("project_id")
    create.add_argument("--scope", choices=("client", "user"), default="client")
    create.add_argument("--token", help=f"user-scoped token (default: ${ENV_USER_TOKEN})")
    create.add_argument("--json", action="store_true", help="print JSON")
    create.set_defaults(func=cmd_token_create)

    settings = sub.add_parser(
        "settings",
        help="a project's settings (levels per logger, dropped error types, exclusions)",
        description="Read and edit the settings the service sends to clients.",
        epilog=SETTINGS_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    settings_sub = settings.add_subparsers(
        dest="settings_command", metavar="{get,set,delete}", required=True
    )
    get = settings_sub.add_parser(
        "get",
        parents=[common],
        help="show a project's settings",
        epilog=SETTINGS_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    get.add_argument(
        "project_id",
        nargs="?",
        help=f"the project (with a user token); without it, the project of ${ENV_API_KEY}",
    )
    get.add_argument("--token", help=f"user-scoped token (default: ${ENV_USER_TOKEN})")
    get.add_argument("--api-key", help=f"project token (default: ${ENV_API_KEY})")
    get.add_argument("--json", action="store_true", help="print JSON")
    get.set_defaults(func=cmd_settings_get)
    set_ = settings_sub.add_parser(
        "set",
        parents=[common],
        help="set one setting",
        epilog=SETTINGS_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    set_.add_argument("project_id")
    set_.add_argument("key", help="e.g. @@log:shop.*, @@error:KeyError, @@DataExclusions")
    set_.add_argument("value")
    set_.add_argument("--token", help=f"user-scoped token (default: ${ENV_USER_TOKEN})")
    set_.set_defaults(func=cmd_settings_set)
    delete = settings_sub.add_parser("delete", parents=[common], help="remove one setting")
    delete.add_argument("project_id")
    delete.add_argument("key")
    delete.add_argument("--token", help=f"user-scoped token (default: ${ENV_USER_TOKEN})")
    delete.set_defaults(func=cmd_settings_delete)

    send = sub.add_parser("send", parents=[common], help="send one event")
    send.add_argument("message")
    send.add_argument("--level", default="Info", help="Trace, Debug, Info, Warn, Error, Fatal")
    send.add_argument("--source", default="eventlog.cli", help="the event's source")
    send.add_argument("--tag", action="append", help="a tag (repeatable)")
    send.add_argument("--type", choices=("log", "error"), default="log", help=argparse.SUPPRESS)
    send.add_argument("--api-key", help=f"project token (default: ${ENV_API_KEY})")
    send.set_defaults(func=cmd_send)

    serve = sub.add_parser("serve", help="run the local collector on loopback")
    try:
        from eventlog_handler.collector._cli import add_serve_arguments

        add_serve_arguments(serve)
    except ImportError:  # pragma: no cover - a broken install
        pass
    serve.set_defaults(func=cmd_serve)

    tail = sub.add_parser(
        "tail", parents=[common], help="print new events as they arrive (Ctrl-C ends)"
    )
    tail.add_argument("--token", help=f"user token (default: ${ENV_USER_TOKEN})")
    tail.add_argument("--errors", action="store_true", help="error events only")
    tail.add_argument("--filter", help="the service's filter syntax, e.g. 'source:shop.*'")
    tail.add_argument("--interval", type=_timeout, default=1.0, help="seconds between polls")
    tail.add_argument(
        "--last", type=_last, default=10, help="events shown at start (10; at most 1000)"
    )
    tail.set_defaults(func=cmd_tail)

    demo = sub.add_parser("demo", help="see the package work against a local collector")
    demo.add_argument("--keep-serving", action="store_true", help="keep the dashboard up")
    demo.add_argument("--port", type=int, default=0, help="collector port (default: a free one)")
    demo.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], int] | None = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return func(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (``eventlog tail | head -1``): stop as a tool killed by
        # SIGPIPE would, without a traceback, and without a second error when Python flushes
        # stdout at exit.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return EXIT_BROKEN_PIPE
    except (CommandError, errors.EventLogError, ValueError) as exc:
        print(f"eventlog: error: {_describe(exc)}", file=sys.stderr)
        return EXIT_ERROR


def _describe(exc: BaseException) -> str:
    if isinstance(exc, errors.AuthenticationError):
        return f"the token was refused ({exc})"
    if isinstance(exc, errors.PermissionDeniedError):
        return f"the token lacks the scope for this ({exc}); a user-scoped token is needed"
    if isinstance(exc, errors.TransportError):
        return f"{exc} (is the server running?)" if exc.kind in ("refused", "timeout") else str(exc)
    if isinstance(exc, errors.RateLimitedError | errors.ServiceUnavailableError):
        return f"{exc}; {_retry_when(exc.retry_after)}"
    if isinstance(exc, errors.ApiError) and exc.location:
        return f"{exc}, redirected to {exc.location} (not followed: pass that --server-url)"
    text: Any = str(exc)
    return str(text).removeprefix("eventlog_handler: ")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
