"""The ``eventlog`` command.

::

    eventlog demo [--keep-serving]          see the package work against a local collector
    eventlog serve [--port 5000] [--db F]   run the local collector
    eventlog projects [--json]              list the projects of a user token
    eventlog token create PROJECT_ID [--scope client|user]
    eventlog send MESSAGE [--level L]       post one event with a project token (API key)

Settings come from flags or from ``EVENTLOG_SERVER_URL``, ``EVENTLOG_USER_TOKEN`` and
``EVENTLOG_API_KEY``. Every failure is one line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from eventlog_handler import errors
from eventlog_handler._version import __version__
from eventlog_handler.api import Client, InsecureTransportWarning
from eventlog_handler.events import LEVELS, log_event
from eventlog_handler.settings import (
    DEFAULT_SERVER_URL,
    ENV_API_KEY,
    ENV_SERVER_URL,
    ENV_USER_TOKEN,
)

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2


class CommandError(Exception):
    """A failure to report as one line on stderr."""


def _server_url(args: argparse.Namespace) -> str:
    return str(args.server_url or os.environ.get(ENV_SERVER_URL) or DEFAULT_SERVER_URL)


def _client(args: argparse.Namespace, token: str | None, env_name: str, flag: str) -> Client:
    if not token:
        raise CommandError(f"no token: pass {flag} or set {env_name}")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", InsecureTransportWarning)
        try:
            client = Client(_server_url(args), token, timeout=args.timeout)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
    for warning in caught:
        text = str(warning.message).removeprefix("eventlog_handler: ")
        print(f"eventlog: warning: {text}", file=sys.stderr)
    return client


def _user_client(args: argparse.Namespace) -> Client:
    token = args.token or os.environ.get(ENV_USER_TOKEN)
    return _client(args, token, ENV_USER_TOKEN, "--token")


# -- commands -------------------------------------------------------------------------------


def cmd_projects(args: argparse.Namespace) -> int:
    projects = _user_client(args).list_projects()
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
    token = _user_client(args).create_token(args.project_id, scopes=[args.scope])
    if args.json:
        print(json.dumps({"id": token.id, "project_id": token.project_id, "scopes": token.scopes}))
    else:
        print(token.id)
        print(
            f"project {token.project_id}, scopes {', '.join(token.scopes)}",
            file=sys.stderr,
        )
    return EXIT_OK


def cmd_send(args: argparse.Namespace) -> int:
    api_key = args.api_key or os.environ.get(ENV_API_KEY)
    client = _client(args, api_key, ENV_API_KEY, "--api-key")
    level = _level(args.level)
    event = log_event(args.message, level=level, source=args.source, tags=args.tag or ())
    if args.type == "error":
        event["type"] = "error"
    client.submit(event)
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
    from eventlog_handler.collector.cli import run_serve

    return run_serve(args)


def cmd_demo(args: argparse.Namespace) -> int:
    from eventlog_handler.demo import run_demo

    return run_demo(keep_serving=args.keep_serving, port=args.port)


def format_table(rows: Sequence[Sequence[str]]) -> str:
    """Rows as left-aligned columns."""
    widths = [max(len(row[index]) for row in rows) for index in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


# -- parser ---------------------------------------------------------------------------------


def _timeout(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not math.isfinite(value) or not 0 < value <= 3600:
        raise argparse.ArgumentTypeError(f"must be between 0 and 3600 seconds, got {text!r}")
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

    projects = sub.add_parser("projects", parents=[common], help="list your projects")
    projects.add_argument("--token", help=f"user-scoped token (default: ${ENV_USER_TOKEN})")
    projects.add_argument("--json", action="store_true", help="print JSON instead of a table")
    projects.set_defaults(func=cmd_projects)

    token = sub.add_parser("token", help="project tokens (API keys)")
    token_sub = token.add_subparsers(dest="token_command", metavar="ACTION")
    create = token_sub.add_parser("create", parents=[common], help="generate a project token")
    create.add_argument("project_id")
    create.add_argument("--scope", choices=("client", "user"), default="client")
    create.add_argument("--token", help=f"user-scoped token (default: ${ENV_USER_TOKEN})")
    create.add_argument("--json", action="store_true", help="print JSON")
    create.set_defaults(func=cmd_token_create)

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
        from eventlog_handler.collector.cli import add_serve_arguments

        add_serve_arguments(serve)
    except ImportError:  # pragma: no cover - a broken install
        pass
    serve.set_defaults(func=cmd_serve)

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
    except (CommandError, errors.EventLogError, ValueError) as exc:
        print(f"eventlog: error: {_describe(exc)}", file=sys.stderr)
        return EXIT_ERROR


def _describe(exc: BaseException) -> str:
    if isinstance(exc, errors.AuthenticationError):
        return f"the token was refused ({exc})"
    if isinstance(exc, errors.PermissionDeniedError):
        return f"the token lacks the scope for this ({exc}); a user-scoped token is needed"
    if isinstance(exc, errors.TransportError):
        return f"{exc} (is the server running?)"
    text: Any = str(exc)
    return str(text).removeprefix("eventlog_handler: ")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
