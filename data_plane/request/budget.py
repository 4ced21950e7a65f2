"""Budget headers -> `Budget` (durations in float seconds), rejecting bad values by header name.

PURE: reads only the mapping it is given. Header names match case-insensitively; a missing
header means "use the policy's default for the category" (None in `Budget`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence

from contracts.budget_headers import (
    ACCURACY_HEADER,
    BUDGET_HEADERS,
    CATEGORY_HEADER,
    COST_HEADER,
    LATENCY_HEADER,
    MODE_HEADER,
    TTFT_HEADER,
)
from contracts.names import CATEGORY_PATTERN
from data_plane.domain import Budget, BudgetMode
from data_plane.errors import InvalidBudget

_CANONICAL = {name.lower(): name for name in BUDGET_HEADERS}

MAX_BUDGET_MS = 3_600_000.0  # one hour: anything longer is a unit mistake, not a budget
MAX_COST_USD = 1_000.0  # per request; larger is a typo (or cents sent as dollars)
_MAX_VALUE_CHARS = 64
# Plain decimal numbers only: Python's float() also takes "nan", "1_000" and "infinity".
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_CATEGORY = re.compile(CATEGORY_PATTERN)


def _repeated(name: str) -> InvalidBudget:
    return InvalidBudget(f"{name} is given more than once with different values", param=name)


def _collect_multi(getall: Callable[[str, tuple[()]], Sequence[str]]) -> dict[str, str]:
    found: dict[str, str] = {}
    for header in BUDGET_HEADERS:
        values = getall(header, ())
        if values:
            value = values[0].strip()
            if len(values) > 1 and any(other.strip() != value for other in values[1:]):
                raise _repeated(header)
            found[header] = value
    return found


def _collect(headers: Mapping[str, str]) -> dict[str, str]:
    """Budget header values by canonical name; a header repeated with different values fails.

    A multidict (aiohttp's request headers) is asked for the six names directly (it matches
    them case-insensitively); any other mapping is read entry by entry."""
    getall = getattr(headers, "getall", None)
    if getall is not None:
        return _collect_multi(getall)
    found: dict[str, str] = {}
    for key, value in headers.items():
        name = _CANONICAL.get(key.lower())
        if name is None:
            continue
        value = value.strip()
        if name in found and found[name] != value:
            raise _repeated(name)
        found[name] = value
    return found


def _shown(value: str) -> str:
    return repr(value if len(value) <= 40 else value[:40] + "...")


def _plain(value: str) -> bool:
    """ASCII digits with at most one '.' after at least one digit ("20000", "0.5", "5."): the
    usual header value, accepted by `_NUMBER` too, checked without the regex engine."""
    whole, _, fraction = value.partition(".")
    return value.isascii() and whole.isdigit() and (not fraction or fraction.isdigit())


def _number(name: str, value: str) -> float:
    if len(value) > _MAX_VALUE_CHARS or not (_plain(value) or _NUMBER.fullmatch(value)):
        raise InvalidBudget(f"{name} must be a number, got {_shown(value)}", param=name)
    number = float(value)
    if not math.isfinite(number):
        raise InvalidBudget(f"{name} must be a finite number, got {_shown(value)}", param=name)
    return number


def _duration_s(name: str, value: str) -> float:
    ms = _number(name, value)
    if ms <= 0:
        raise InvalidBudget(f"{name} must be a positive number of milliseconds", param=name)
    if ms > MAX_BUDGET_MS:
        raise InvalidBudget(
            f"{name} must be at most {MAX_BUDGET_MS:.0f} ms (one hour), got {value}", param=name
        )
    return ms / 1000.0


def _accuracy(value: str) -> float:
    accuracy = _number(ACCURACY_HEADER, value)
    if not 0.0 <= accuracy <= 1.0:
        raise InvalidBudget(
            f"{ACCURACY_HEADER} must be between 0 and 1 (a ratio, not a percentage), got {value}",
            param=ACCURACY_HEADER,
        )
    return accuracy


def _cost(value: str) -> float:
    cost = _number(COST_HEADER, value)
    if cost <= 0:
        raise InvalidBudget(f"{COST_HEADER} must be a positive amount in USD", param=COST_HEADER)
    if cost > MAX_COST_USD:
        raise InvalidBudget(
            f"{COST_HEADER} must be at most {MAX_COST_USD:.0f} USD per request, got {value}",
            param=COST_HEADER,
        )
    return cost


def _mode(value: str) -> BudgetMode:
    try:
        return BudgetMode(value.lower())
    except ValueError:
        allowed = ", ".join(m.value for m in BudgetMode)
        raise InvalidBudget(
            f"{MODE_HEADER} must be one of {allowed}, got {_shown(value)}", param=MODE_HEADER
        ) from None


def _category(value: str) -> str:
    category = value.lower()
    if not _CATEGORY.fullmatch(category):
        raise InvalidBudget(
            f"{CATEGORY_HEADER} must be a category name like 'code' "
            f"(letters, digits, '-' or '_', at most 40), got {_shown(value)}",
            param=CATEGORY_HEADER,
        )
    return category


def parse_budget(headers: Mapping[str, str]) -> Budget:
    """Read the six budget headers; raise InvalidBudget (param = header name) on a bad value.

    Durations arrive in milliseconds and leave as float seconds. Budgets must be positive and
    at most an hour; accuracy is a ratio in [0, 1]; the mode is `best-effort` or `strict`
    (case-insensitive); the category is syntax-checked here and checked against the table's
    categories by `data_plane.request.category.check_category` (a 400 listing them).
    """
    found = _collect(headers)
    if not found:
        return Budget()
    latency = found.get(LATENCY_HEADER)
    ttft = found.get(TTFT_HEADER)
    accuracy = found.get(ACCURACY_HEADER)
    cost = found.get(COST_HEADER)
    mode = found.get(MODE_HEADER)
    category = found.get(CATEGORY_HEADER)
    return Budget(
        latency_s=None if latency is None else _duration_s(LATENCY_HEADER, latency),
        ttft_s=None if ttft is None else _duration_s(TTFT_HEADER, ttft),
        min_accuracy=None if accuracy is None else _accuracy(accuracy),
        max_cost_usd=None if cost is None else _cost(cost),
        mode=None if mode is None else _mode(mode),
        category=None if category is None else _category(category),
    )
