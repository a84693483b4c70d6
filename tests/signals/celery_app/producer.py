import os
import sys

import atomic_broker  # noqa: F401  (whole message files only)
from celery import Celery

folder = os.environ["BROKER_DIR"]
app = Celery("producer", broker="filesystem://")
app.conf.broker_transport_options = {
    "data_folder_in": folder,
    "data_folder_out": folder,
    "data_folder_processed": folder + "/done",
}
for name in sys.argv[1:]:
    args = [1] if name == "tasks.warn" else []
    app.send_task(name, args=args)
