"""Which loggers' records become events, by name (``capture._admit``)."""

from __future__ import annotations

import logging
import math

import pytest

from eventlog_handler.capture._admit import is_ignored_logger, is_routine_logger, source_minimum


@pytest.mark.parametrize(
    ("name", "minimum"),
    [
        ("shop.views", 0.0),
        ("django.request", 0.0),  # Django's 500s and 404s: sent as the README says
        ("django.server", math.inf),  # runserver's request lines, like werkzeug's
        ("django.server.sub", math.inf),
        ("django.serverless", 0.0),  # a name that only starts alike is not a child
        ("werkzeug", math.inf),
        ("urllib3.connectionpool", math.inf),
        ("django.utils.autoreload", float(logging.WARNING)),  # "Watching for file changes"
        ("uvicorn.error", float(logging.WARNING)),
        ("celery.worker.strategy", float(logging.WARNING)),
    ],
)
def test_the_lowest_level_sent_by_logger_name(name: str, minimum: float) -> None:
    assert source_minimum(name) == minimum
    assert is_ignored_logger(name) is (minimum == math.inf)
    assert is_routine_logger(name) is (minimum == logging.WARNING)


def test_ignore_loggers_adds_a_logger_and_its_children() -> None:
    assert source_minimum("noisy.lib.part", ("noisy.lib",)) == math.inf
    assert source_minimum("noisy.library", ("noisy.lib",)) == 0.0
