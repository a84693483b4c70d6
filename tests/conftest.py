"""Settings every test's process shares."""

from __future__ import annotations

import signal

# A shell starts a background job (``python -m pytest &``, ``nohup``, some CI runners) with
# SIGINT ignored, and a child process inherits that: the tests that press Ctrl-C on a program
# they started (``eventlog tail``, ``eventlog serve``) would then wait for an exit that never
# comes. A handler of Python's own is not inherited across exec, so with one installed here
# each child starts with Ctrl-C doing what it does in a terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
