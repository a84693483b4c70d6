"""The local collector: the service's API on loopback with SQLite storage and a dashboard.

``eventlog serve`` (or ``python -m eventlog_handler.collector``) runs it from the command line;
:class:`Collector` runs it from Python, e.g. in tests::

    with Collector() as collector:
        ...  # post to collector.url with collector.project_token
        assert collector.wait_for_events(1)[0]["type"] == "log"

It reproduces the service contract (the Exceptionless server's REST API v2): bearer tokens and scopes, 202/201,
401/403/404/411/413/415/422/429, gzip bodies, batches, field limits and reference-id
de-duplication. It is a development tool, not a production server.
"""

from eventlog_handler.collector._app import Collector, is_loopback
from eventlog_handler.collector._server import RequestInfo, RequestRecord

__all__ = ["Collector", "RequestInfo", "RequestRecord", "is_loopback"]
