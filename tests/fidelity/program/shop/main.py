"""Three failures: a chained one through a library, one in the standard library, and an
uncaught one at the end of a recursion whose depth comes from the environment."""

import json
import logging

from shop import inventory, pricing

log = logging.getLogger("shop.main")


def run(depth: int) -> None:
    cart = pricing.Cart([("A-1", 10.0, 2), ("B-2", 2.5, 4)])
    try:
        cart.checkout(
            currency="EUR",
            customer="c-42",
        )
    except pricing.PaymentDeclined:
        log.exception("checkout failed")
    try:
        json.loads("{broken")
    except ValueError:
        log.exception("import failed")
    inventory.reserve(inventory.chain(depth))
