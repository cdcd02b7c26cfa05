"""Kubernetes resource quantities ("500m", "2", "16Gi") as the integers the scheduler compares.

Why here and not a client library: the scheduling core must import nothing heavy, and only
two conversions are needed, CPU to millicores and memory to MiB, with kube-scheduler's
rounding (a request is rounded up: asking 1.5 MiB reserves 2).

Why the text is checked before any arithmetic: a pod spec is untrusted input, parsed on the
scheduler's event loop for every ``/filter``, ``/prioritize`` and admission review, and
``Decimal`` arithmetic costs what its operands are long: ``"1e999999"`` is a short string,
but rounding it to an integer builds a million-digit number (half a minute of a frozen
process) and ``"1e999999999"`` overflows the decimal context. So a quantity is first checked
as text (its length, its grammar, and the order of magnitude its digits, exponent and suffix
give) and refused unless Kubernetes itself could hold it: apimachinery's
``resource.Quantity`` represents no number above 2^63-1 in magnitude. Only then is it turned
into a ``Decimal``, whose operands are now at most :data:`MAX_QUANTITY_CHARS` digits with a
small exponent, so every step costs microseconds.
"""

from __future__ import annotations

import math
import re
from decimal import Context, Decimal

#: Largest magnitude of a Kubernetes quantity (apimachinery's ``resource.Quantity``: "no
#: quantity may represent a number greater than 2^63-1 in magnitude").
MAX_QUANTITY = 2**63 - 1
#: Longest quantity text read. 2^63-1 has 19 digits; with a sign, a decimal point, nine
#: decimals (nano, the finest suffix) and a suffix, any quantity written in a sensible way
#: stays under 32 characters. Beyond this the text is refused before it is parsed at all.
MAX_QUANTITY_CHARS = 64
#: Decimal order of magnitude above which a value cannot be a quantity: 10^19 > 2^63-1.
_MAX_ORDER = 18
#: Finest value a quantity holds: 1n (10^-9, the smallest suffix). Kubernetes rounds a more
#: precise quantity up to it; so does :func:`parse_quantity`, without building the digits.
_MIN_ORDER = -9
_NANO = Decimal("1e-9")
#: Enough digits for every product and quotient below to be exact: a quantity has at most
#: MAX_QUANTITY_CHARS digits, a multiplier at most 19 (2^60), a MiB divisor adds 20.
_EXACT = Context(prec=2 * MAX_QUANTITY_CHARS)

# Suffixes of resource.Quantity (k8s.io/apimachinery, quantity.go): binary and decimal SI,
# each with its multiplier and its decimal order of magnitude (2^10 ~ 10^3).
_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_UNITS: dict[str, tuple[Decimal, int]] = {
    **{s: (Decimal(2 ** (10 * k)), 3 * k) for s, k in _BINARY.items()},
    **{s: (Decimal(10) ** k, k) for s, k in _DECIMAL.items()},
}
# <sign><digits>[.<digits>] then an exponent or a suffix (apimachinery's grammar: one
# <suffix>, which is a binary SI unit, a decimal SI unit or a decimal exponent).
_QUANTITY = re.compile(
    r"(?P<sign>[+-]?)(?P<int>[0-9]*)(?:\.(?P<frac>[0-9]*))?"
    r"(?:[eE](?P<exp>[+-]?[0-9]+)|(?P<unit>[a-zA-Z]{1,2}))?"
)
MIB = 2**20


class QuantityError(ValueError):
    """A text that is not a Kubernetes quantity; ``reason`` says why, without the text."""

    def __init__(self, value: object, reason: str) -> None:
        super().__init__(f"{shown(value)} {reason}")
        self.reason = reason


class QuantityRangeError(QuantityError):
    """A well-formed number that no Kubernetes quantity can hold (above 2^63-1)."""


TOO_LARGE = (
    f"is larger than any Kubernetes quantity (at most 2^63-1 = {MAX_QUANTITY:,} in magnitude)"
)


def shown(value: object, limit: int = 40) -> str:
    """*value* quoted for a message, cut to *limit* characters: a message naming a value
    is copied into the answer for every candidate node, so a long value must not be."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 4]}...{text[-1]}"


def has_unit(value: str) -> bool:
    """Whether the quantity text ends in a unit suffix (``Gi``, ``M``, ``m`` ...)."""
    return value.strip()[-1:].isalpha()


#: A whole number followed by a decimal SI suffix: how kube-apiserver writes a plain integer it
#: stores (its canonical form takes the largest power of 1000 that keeps the mantissa whole:
#: ``8000`` is stored and sent to webhooks as ``8k``, ``16000000`` as ``16M``).
_CANONICAL_INTEGER = re.compile(r"^[0-9]+[kMGTPE]$")


def may_be_canonical_integer(value: str) -> bool:
    """Whether *value* may be a plain number the API server rewrote in canonical form
    (``8k`` for ``8000``): a whole number with a decimal SI suffix. Such a text cannot tell
    whether a user wrote ``8k`` or ``8000``, so readers of unit-less resources (HAMi's
    ``nvidia.com/gpumem``, Go's ``Quantity.Value()``) take its value, 8000."""
    return _CANONICAL_INTEGER.match(value.strip()) is not None


def parse_quantity(value: str | int | float) -> Decimal:
    """The value of a quantity in base units (cores, bytes).

    :raises QuantityRangeError: larger than a quantity can be;
    :raises QuantityError: anything else that is not a quantity.
    """
    if isinstance(value, bool):
        raise QuantityError(value, "is not a Kubernetes quantity like '500m', '2' or '16Gi'")
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            raise QuantityError(value, "is not a finite number")
        if abs(value) > MAX_QUANTITY:
            raise QuantityRangeError(value, TOO_LARGE)
        return Decimal(str(value))
    text = str(value).strip()
    if len(text) > MAX_QUANTITY_CHARS:
        raise QuantityError(
            text,
            f"is {len(text):,} characters long; a Kubernetes quantity has at most "
            f"{MAX_QUANTITY_CHARS}",
        )
    match = _QUANTITY.fullmatch(text)
    if match is None or not (match["int"] or match["frac"]):
        raise QuantityError(value, "is not a Kubernetes quantity like '500m', '2' or '16Gi'")
    unit = match["unit"] or ""
    scale = _UNITS.get(unit)
    if scale is None:
        raise QuantityError(value, f"has an unknown unit {unit!r}")
    multiplier, unit_order = scale
    digits = match["int"].lstrip("0")
    fraction = match["frac"] or ""
    if digits:
        order = len(digits) - 1
    else:
        significant = fraction.lstrip("0")
        if not significant:
            return Decimal(0)  # zero, whatever its exponent or unit
        order = -(len(fraction) - len(significant)) - 1
    # The exponent's digits are bounded by the length check: int() of them is cheap.
    order += int(match["exp"] or 0) + unit_order
    negative = match["sign"] == "-"
    if order > _MAX_ORDER:
        raise QuantityRangeError(value, TOO_LARGE)
    if order < _MIN_ORDER:
        return -_NANO if negative else _NANO
    number = match[0][: match.start("unit")] if unit else match[0]
    # Bounded operands now: at most MAX_QUANTITY_CHARS digits, |value| < 10^19.
    result = _EXACT.multiply(Decimal(number), multiplier)
    if abs(result) > MAX_QUANTITY:
        raise QuantityRangeError(value, TOO_LARGE)
    return result


def cpu_millis(value: str | int | float) -> int:
    """CPU in millicores, rounded up."""
    return math.ceil(_EXACT.multiply(parse_quantity(value), 1000))


def memory_mib(value: str | int | float, *, round_up: bool = True) -> int:
    """Memory in MiB, rounded up (requests) or down (allocatable)."""
    mib = _EXACT.divide(parse_quantity(value), MIB)
    return math.ceil(mib) if round_up else math.floor(mib)
