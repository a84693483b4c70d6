"""An RQ app whose worker ships its jobs' logs and failures.

RQ runs each job in a work horse, a child it forks and ends with ``os._exit``: ``setup()`` must
run in the worker before it forks. ``rq worker -c rq_app`` imports this module as the worker's
settings at its start, which does it. With Redis on this machine, and events going to the local
collector unless EVENTLOG_SERVER_URL says otherwise::

    eventlog serve &                       # the local collector, on 127.0.0.1:5000
    export EVENTLOG_API_KEY=...            # the project token it printed
    redis-server --port 6379 &             # Debian: apt-get install redis-server
    rq worker -c rq_app                    # from this directory

and give it jobs from another terminal::

    python -c "import rq_app; rq_app.enqueue_examples()"
"""

import logging
import os

from redis import Redis
from rq import Queue, Retry

import eventlog_handler

REDIS_URL = os.environ.get("RQ_REDIS_URL", "redis://127.0.0.1:6379/0")  # read by rq worker -c

# In the worker, before it forks a work horse for each job.
eventlog_handler.setup(tags=["worker"])

log = logging.getLogger("shop.jobs")


def charge(order_id):
    """Fails every time: with Retry(max=2), one error event, at the final failure."""
    log.info("charging order %s", order_id)
    raise ConnectionError("payment gateway unreachable")


def report():
    """A warning, with the job's function as a tag."""
    log.warning("stock is low for sku A-1")


def enqueue_examples():
    queue = Queue(connection=Redis.from_url(REDIS_URL))
    queue.enqueue(report)
    queue.enqueue(charge, 42, retry=Retry(max=2))
