"""``eventlog serve``: run the local collector until Ctrl-C.

Options::

    eventlog serve [--host 127.0.0.1] [--port 5000] [--db PATH] [--throttle N]
                   [--max-body-bytes N] [--max-connections N] [--header-timeout S]
                   [--print-env] [--allow-remote] [--host-name NAME] [--verbose]

The database defaults to ``eventlog-collector.sqlite3`` in the current directory, so running the
command again in the same place finds the same tokens and events; ``--db :memory:`` keeps
nothing. ``--port 0`` picks a free port (the URL printed is the real one). A host that is not a
loopback address is refused unless ``--allow-remote`` is given.

The main ``eventlog`` command adds the subcommand with :func:`add_serve_arguments` and
:func:`run_serve`; ``python -m eventlog_handler.collector`` runs :func:`main`.
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sqlite3
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import TextIO

from eventlog_handler.collector._app import Collector

__all__ = ["DEFAULT_DB", "DEFAULT_PORT", "add_serve_arguments", "main", "run_serve"]

DEFAULT_DB = "eventlog-collector.sqlite3"
DEFAULT_PORT = 5000


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``serve`` options to ``parser``."""
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default: 127.0.0.1; loopback only unless --allow-remote)",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help=f"port to listen on; 0 picks a free one (default: {DEFAULT_PORT})",
    )
    parser.add_argument(
        "--db",
        default=DEFAULT_DB,
        metavar="PATH",
        help=f"SQLite database file, created if missing (default: ./{DEFAULT_DB};"
        " ':memory:' keeps nothing)",
    )
    parser.add_argument(
        "--throttle",
        type=int,
        default=None,
        metavar="N",
        help="answer 429 beyond N requests per 15 minutes per organization",
    )
    parser.add_argument(
        "--max-body-bytes",
        type=int,
        default=200_000,
        metavar="N",
        help="request body limit in bytes (default: 200000, as the service)",
    )
    parser.add_argument(
        "--max-connections",
        type=int,
        default=64,
        metavar="N",
        help="connections served at once; more are answered 503 (default: 64)",
    )
    parser.add_argument(
        "--header-timeout",
        type=float,
        default=10.0,
        metavar="S",
        help="seconds a request's headers may take once it has begun (default: 10)",
    )
    parser.add_argument(
        "--print-env",
        action="store_true",
        help="also print 'export EVENTLOG_...=' lines for a shell",
    )
    parser.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow a non-loopback --host (the API and dashboard are then open to the network)",
    )
    parser.add_argument(
        "--host-name",
        action="append",
        default=[],
        metavar="NAME",
        help="also answer requests addressed to NAME (Host header), e.g. the machine's name with"
        " --allow-remote; loopback names and IP addresses are always answered",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log every request on stderr")


def _print_banner(collector: Collector, args: argparse.Namespace, out: TextIO) -> None:
    database = "in memory" if collector.db_path is None else str(collector.db_path.resolve())
    lines = [
        f"eventlog collector serving at {collector.url}",
        f"  dashboard:     {collector.url}/",
        f"  database:      {database}",
        f"  organization:  {collector.organization_id}",
        f"  project id:    {collector.project_id}",
        f"  project token: {collector.project_token}   (API key: posts events)",
        f"  user token:    {collector.user_token}   (lists projects, creates tokens)",
        f"  login:         {collector.admin_email} / {collector.admin_password}"
        "   (POST /api/v2/auth/login)",
    ]
    if args.print_env:
        lines += [
            "",
            f"export EVENTLOG_SERVER_URL={shlex.quote(collector.url)}",
            f"export EVENTLOG_API_KEY={shlex.quote(collector.project_token)}",
            f"export EVENTLOG_USER_TOKEN={shlex.quote(collector.user_token)}",
            f"# login: {collector.admin_email} {shlex.quote(collector.admin_password)}",
        ]
    lines += ["", "Press Ctrl-C to stop."]
    out.write("\n".join(lines) + "\n")
    out.flush()


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def run_serve(args: argparse.Namespace) -> int:
    """Serve until Ctrl-C (or SIGTERM); 0 on a clean stop, 2 on a refused option, 1 if the
    address cannot be bound."""
    db_path: Path | None = None if args.db == ":memory:" else Path(args.db)
    new_db = db_path is not None and not db_path.exists()
    unbound = False
    try:
        collector = Collector(
            db_path,
            host=args.host,
            port=args.port,
            throttle=args.throttle,
            max_body_bytes=args.max_body_bytes,
            allow_remote=args.allow_remote,
            verbose=args.verbose,
            max_connections=getattr(args, "max_connections", 64),
            header_timeout=getattr(args, "header_timeout", 10.0),
            host_names=tuple(getattr(args, "host_name", ()) or ()),
        )
    except ValueError as exc:
        print(f"eventlog serve: {exc}", file=sys.stderr)
        return 2
    previous = None
    in_main_thread = threading.current_thread() is threading.main_thread()
    try:
        try:
            collector.start()
        except OSError as exc:
            print(
                f"eventlog serve: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr
            )
            unbound = True
            return 1
        except sqlite3.Error as exc:  # a file that is not a database, a damaged one
            print(
                f"eventlog serve: cannot use {args.db} as the collector's database: {exc}",
                file=sys.stderr,
            )
            unbound = True
            return 1
        if in_main_thread:
            previous = signal.signal(signal.SIGTERM, _interrupt)
        _print_banner(collector, args, sys.stdout)
        threading.Event().wait()
    except KeyboardInterrupt:
        print("\nstopped.", file=sys.stderr)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        collector.close()
        if unbound and new_db and db_path is not None:  # it served nothing: leave no database
            for leftover in (db_path, Path(f"{db_path}-wal"), Path(f"{db_path}-shm")):
                leftover.unlink(missing_ok=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m eventlog_handler.collector``: the ``serve`` command on its own."""
    parser = argparse.ArgumentParser(
        prog="python -m eventlog_handler.collector",
        description="Run the local event collector (the service's API on loopback).",
    )
    add_serve_arguments(parser)
    return run_serve(parser.parse_args(argv))
