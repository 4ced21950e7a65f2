"""The priority classes a request asks for: `X-Priority` naming one of the policy's classes,
and the class the policy maps llm-d's objective header to (docs/data_plane.md, "Tenants,
priorities and admission"). Whether the request gets what it asks is `request/identity.py`'s
rule: a class above its default needs the right to it.

PURE. An unknown `X-Priority` class is a 400 naming the header and the classes there are. An
objective the policy does not map names no class: objectives are the cluster's
InferenceObjective objects (docs/gateway.md, "Priority from the objective header"), and a
request the endpoint picker serves must not be refused for naming one the policy leaves out.
"""

from __future__ import annotations

from collections.abc import Mapping

from contracts.policy import Policy, PriorityClass
from data_plane.errors import InvalidRequest

PRIORITY_HEADER = "X-Priority"
# llm-d's objective header (its router v1.0 name), then the Gateway API Inference Extension's
# older name that llm-d still reads as a deprecated alias; the first present counts.
OBJECTIVE_HEADERS = ("x-llm-d-inference-objective", "x-gateway-inference-objective")


def asked_class(headers: Mapping[str, str], policy: Policy) -> str | None:
    """The class `X-Priority` names (None: no header); a class the policy does not define is
    a 400 naming the header."""
    value = headers.get(PRIORITY_HEADER)
    if value is None:
        return None
    name = value.strip().lower()
    if name not in policy.priorities:
        known = ", ".join(sorted(policy.priorities))
        raise InvalidRequest(
            f"{PRIORITY_HEADER} {name[:64]!r} is not a priority class; the policy defines: {known}",
            param=PRIORITY_HEADER,
            code="invalid_priority",
        )
    return name


def objective_class(headers: Mapping[str, str], policy: Policy) -> str | None:
    """The class `policy.objectives` maps the request's objective to (None: no objective
    header, or one the policy does not map)."""
    if not policy.objectives:
        return None
    for header in OBJECTIVE_HEADERS:
        objective = headers.get(header)
        if objective is not None:
            return policy.objectives.get(objective.strip())
    return None


def at_most(asked: PriorityClass, limit: PriorityClass) -> bool:
    """Whether class `asked` ranks no higher than `limit`: classes rank by (not sheddable,
    share), so a class that is never shed, or may fill more, is above."""
    return (not asked.sheddable, asked.share) <= (not limit.sheddable, limit.share)
