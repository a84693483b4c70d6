"""``python -m shop``: the same program as ``run_shop.py``."""

import os

import eventlog_handler
from shop import main

eventlog_handler.setup(tags=[os.environ["SHOP_RUN"]])
main.run(int(os.environ.get("SHOP_DEPTH", "3")))
