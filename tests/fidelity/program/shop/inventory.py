"""Inventory: a reservation walks a chain of warehouses until one has stock."""


class NoWarehouse(Exception):
    """No warehouse in the chain could take the reservation."""


def chain(depth):
    node = None
    for level in range(depth):
        node = {"level": level, "next": node}
    return node


def reserve(node):
    if node is None:
        raise NoWarehouse("the reservation chain ended without a warehouse")
    return reserve(node["next"])
