"""Pricing: a cart whose payment goes through ``tinylib``, an installed library."""

import functools

import tinylib


class PaymentDeclined(Exception):
    """The payment gateway refused the payment."""


def audited(func):
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        return func(*args, **kwargs)

    return wrapper


class Cart:
    def __init__(self, lines):
        self.lines = lines

    def total(self):
        return sum(price * quantity for _, price, quantity in self.lines)

    @audited
    def checkout(self, currency, customer):
        try:
            return tinylib.charge(
                self.total(),
                currency=currency,
                checks=[fraud_check, limit_check],
            )
        except tinylib.GatewayError as exc:
            raise PaymentDeclined(f"payment of {self.total()} for {customer} declined") from exc


def fraud_check(amount, currency):
    return amount < 1_000


def limit_check(amount, currency):
    scores = {
        code: amount * rate
        for code, rate in [("EUR", 1.0), ("USD", 1.1)]
        if code == currency and amount * rate > 20
    }
    if scores:
        raise tinylib.GatewayError(f"{currency} {amount} is over the limit")
    return True
