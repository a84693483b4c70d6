"""The shop: checkout, pricing and inventory."""
