"""A Celery app whose worker ships its tasks' logs and failures, with Celery's defaults.

Run a worker (the filesystem transport needs no broker server; everything stays on this
machine, and events go to the local collector unless EVENTLOG_SERVER_URL says otherwise)::

    mkdir -p /tmp/celery-broker/done
    eventlog serve &                       # the local collector, on 127.0.0.1:5000
    export EVENTLOG_API_KEY=...            # the project token it printed
    celery -A celery_app worker -l info    # from this directory

and send it tasks from another terminal::

    python -c "import celery_app; celery_app.charge.delay(42); celery_app.report.delay()"
"""

import logging
import os

from celery import Celery

import eventlog_handler

BROKER = os.environ.get("CELERY_BROKER_DIR", "/tmp/celery-broker")
app = Celery("celery_app", broker="filesystem://")
app.conf.broker_transport_options = {
    "data_folder_in": BROKER,
    "data_folder_out": BROKER,
    "data_folder_processed": os.path.join(BROKER, "done"),
}
app.conf.task_ignore_result = True

# After Celery is imported: the handler survives the worker's logging setup.
eventlog_handler.setup(tags=["worker"])

log = logging.getLogger("shop.tasks")


@app.task(bind=True, max_retries=2, default_retry_delay=1)
def charge(self, order_id):
    """Retries twice, then fails: one error event, at the final failure."""
    log.info("charging order %s (try %d)", order_id, self.request.retries + 1)
    try:
        raise ConnectionError("payment gateway unreachable")
    except ConnectionError as exc:
        raise self.retry(exc=exc) from exc


@app.task
def report():
    """A warning, with the task's name as a tag."""
    log.warning("nightly report is late")
