"""Jobs of the RQ tests, and the worker's settings module (``rq worker -c jobs``): importing it
calls ``eventlog_handler.setup()`` in the worker before it forks its work horses."""

import logging
import os
import time

import eventlog_handler

REDIS_URL = os.environ["RQ_REDIS_URL"]

eventlog_handler.setup(tags=["rq-tests"])

log = logging.getLogger("shop.jobs")


def warn(number):
    log.warning("job warning %s", number)


def fail():
    raise KeyError("no such order")


def flaky():
    log.info("flaky attempt")
    raise ValueError("gateway unreachable")


def slow_warning(seconds):
    log.warning("slow job started")
    time.sleep(seconds)
    log.warning("slow job finished")


def set_user_and_tag():
    eventlog_handler.set_user("leaky-user")
    eventlog_handler.add_tags("leaky-tag")
    log.warning("job with a user")


def killed():
    """Its work horse dies as the OOM killer ends it: nothing is raised anywhere."""
    import signal

    os.kill(os.getpid(), signal.SIGKILL)


def rq_lines():
    """Lines on RQ's own logger, which RQ keeps from going up to the root logger."""
    rq_log = logging.getLogger("rq.worker")
    rq_log.warning("rq worker warning from a job")
    rq_log.error("rq worker error from a job")
