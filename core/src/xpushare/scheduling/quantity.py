"""Kubernetes resource quantities ("500m", "2", "16Gi") as the integers the scheduler compares.

Why here and not a client library: the scheduling core must import nothing heavy, and only
two conversions are needed, CPU to millicores and memory to MiB, with kube-scheduler's
rounding (a request is rounded up: asking 1.5 MiB reserves 2).
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

# Suffixes of resource.Quantity (k8s.io/apimachinery, quantity.go): binary and decimal SI.
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]{0,2})$")
MIB = 2**20


def parse_quantity(value: str | int | float) -> Decimal:
    """The value of a quantity in base units (cores, bytes); ``ValueError`` if malformed."""
    if isinstance(value, int | float):
        return Decimal(str(value))
    text = str(value).strip()
    match = _QUANTITY.match(text)
    if not match:
        raise ValueError(f"{value!r} is not a Kubernetes quantity like '500m', '2' or '16Gi'")
    number, suffix = match.groups()
    try:
        base = Decimal(number)
    except InvalidOperation:
        raise ValueError(f"{value!r} is not a Kubernetes quantity") from None
    if suffix in _BINARY:
        return base * _BINARY[suffix]
    if suffix in _DECIMAL:
        return base * _DECIMAL[suffix]
    raise ValueError(f"{value!r} has an unknown unit {suffix!r}")


def cpu_millis(value: str | int | float) -> int:
    """CPU in millicores, rounded up."""
    return math.ceil(parse_quantity(value) * 1000)


def memory_mib(value: str | int | float, *, round_up: bool = True) -> int:
    """Memory in MiB, rounded up (requests) or down (allocatable)."""
    mib = parse_quantity(value) / MIB
    return math.ceil(mib) if round_up else math.floor(mib)
