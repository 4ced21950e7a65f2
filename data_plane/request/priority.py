"""A request's priority class: `X-Priority` naming one of the policy's classes, else the
policy's default (docs/data_plane.md, "Tenants, priorities and admission").

PURE. An unknown class is a 400 naming the header and the classes there are.
"""

from __future__ import annotations

from collections.abc import Mapping

from contracts.policy import Policy, PriorityClass
from data_plane.errors import InvalidRequest

PRIORITY_HEADER = "X-Priority"


def priority_of(headers: Mapping[str, str], policy: Policy) -> tuple[str, PriorityClass]:
    """(class name, class) of a request under `policy`."""
    value = headers.get(PRIORITY_HEADER)
    name = policy.default_priority if value is None else value.strip().lower()
    found = policy.priorities.get(name)
    if found is None:
        known = ", ".join(sorted(policy.priorities))
        raise InvalidRequest(
            f"{PRIORITY_HEADER} {name[:64]!r} is not a priority class; the policy defines: {known}",
            param=PRIORITY_HEADER,
            code="invalid_priority",
        )
    return name, found
