"""A small shop program that fails three ways; the tests run copies of it from different
directories, virtual environments and Python versions."""

import os

from shop import main

import eventlog_handler

eventlog_handler.setup(tags=[os.environ["SHOP_RUN"]])
main.run(int(os.environ.get("SHOP_DEPTH", "3")))
