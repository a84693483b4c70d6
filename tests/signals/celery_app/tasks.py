import logging
import os
import time
from pathlib import Path

import atomic_broker  # noqa: F401  (whole message files only)
from celery import Celery
from celery.exceptions import Ignore, Reject
from celery.signals import worker_process_init
from celery.utils.log import get_task_logger

import eventlog_handler

folder = os.environ["BROKER_DIR"]
app = Celery("tasks", broker="filesystem://")
app.conf.broker_transport_options = {
    "data_folder_in": folder,
    "data_folder_out": folder,
    "data_folder_processed": folder + "/done",
}
app.conf.task_ignore_result = True
if os.environ.get("SETUP_IN") == "worker_process_init":  # in each pool child only

    @worker_process_init.connect
    def set_up(**_):
        eventlog_handler.setup()

else:
    eventlog_handler.setup()
log = logging.getLogger("tasks")
task_log = get_task_logger(__name__)


@app.task(name="tasks.warn")
def warn(n):
    log.warning("task warning %s", n)
    task_log.warning("task logger warning %s", n)


@app.task(name="tasks.flaky", bind=True, max_retries=2, default_retry_delay=0)
def flaky(self):
    try:
        raise ValueError("flaky failed")
    except ValueError as exc:
        raise self.retry(exc=exc, countdown=0) from exc


@app.task(
    name="tasks.auto",
    autoretry_for=(KeyError,),
    max_retries=2,
    default_retry_delay=0,
    retry_backoff=False,
)
def auto():
    raise KeyError("auto failed")


@app.task(name="tasks.ignored")
def ignored():
    raise Ignore()


@app.task(name="tasks.rejected")
def rejected():
    raise Reject("no", requeue=False)


@app.task(name="tasks.printing")
def printing():
    print("printed by a task", flush=True)


@app.task(name="tasks.hard", time_limit=1)
def hard():
    time.sleep(30)


@app.task(name="tasks.export", time_limit=1)
def export():
    """Another task killed at its time limit: another bug, another stack."""
    time.sleep(30)


@app.task(name="tasks.hard_requeued", time_limit=1, acks_late=True, acks_on_timeout=False)
def hard_requeued():
    """Killed at its time limit twice, requeued each time (acks_late), then done."""
    runs = Path(folder) / "runs"
    count = int(runs.read_text()) if runs.exists() else 0
    runs.write_text(str(count + 1))
    if count < 2:
        time.sleep(30)
