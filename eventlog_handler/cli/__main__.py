"""``python -m eventlog_handler.cli``."""

import sys

from eventlog_handler.cli._main import main

sys.exit(main())
