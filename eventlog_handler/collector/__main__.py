"""``python -m eventlog_handler.collector``: run the local collector."""

from eventlog_handler.collector._cli import main

raise SystemExit(main())
