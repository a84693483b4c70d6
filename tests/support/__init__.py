"""What the tests share: loopback servers, fixtures, waits and child processes.

Import from here, never from another directory's ``conftest.py``:

- :mod:`tests.support.constants`: API keys, fast engine timings, paths of the repository;
- :mod:`tests.support.capture`: :class:`CaptureServer`, a loopback events endpoint that records
  what is posted (answers 202), and :func:`deliver`;
- :mod:`tests.support.faultserver`: :class:`FaultServer`, a scriptable endpoint with faults;
- :mod:`tests.support.collector`: an HTTP client for the local collector and problem checks;
- :mod:`tests.support.processes`: the environment of a child interpreter, running programs;
- :mod:`tests.support.waits`: :func:`wait_until`, :func:`poll_until`, :func:`free_port`;
- :mod:`tests.support.accounting`: the accounting identity on ``stats()``;
- :mod:`tests.support.fixtures`: pytest fixtures, and :func:`~tests.support.fixtures.tmpfs`, a
  small disk mounted for a block; a ``conftest.py`` (or a test module, for itself) imports the
  fixtures it wants (``from tests.support.fixtures import fault_server  # noqa: F401``).
"""
