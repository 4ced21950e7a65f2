"""Priority and tenant by right: who a request is and the class it is served as
(docs/data_plane.md, "Tenants, priorities and admission").

PURE. Every header a client sends is a claim; a claim counts only from a source with the right
to it:
- With API keys (`API_KEYS`, `API_KEYS_FILE`) the middleware has already checked the bearer
  key; the key's grant (`KeyGrant`) names its tenant, the classes it may use and its default
  class. The key's tenant wins over the tenant header and llm-d's fairness id, unless the key
  is a trusted gateway's (`trusted_gateway`), whose headers speak for the principal behind it.
- A class may always be LOWERED below the request's default (`X-Priority: batch`); a class
  above it needs the right: the key's `priorities`, a trusted gateway's key, or
  `ADMISSION_PRIORITY_HEADER_TRUSTED` (the deployment's own gateway sets `X-Priority` and drops the
  client's copy). A class asked for without the right is not an error: the request is served
  as its default class, and `X-Gearbox-Priority` says so.
- llm-d's objective header names a class through the policy's `objectives`. In gateway mode
  it is the gateway's (Envoy's route and the endpoint picker set it, `objective_trusted`) and
  sets the request's default class; in the HTTP data plane it is a client's claim like
  `X-Priority` (trusted only with the same rights).
- Without keys, the tenant header is read as today: it is the deployment's gateway that must
  set it and drop the client's copy; without one, the bearer key's hash, else `anonymous`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from contracts.policy import Policy, PriorityClass
from data_plane.client_keys import KeyGrant, key_digest
from data_plane.request.priority import asked_class, at_most, objective_class
from data_plane.request.tenant import ANONYMOUS, bearer_token, key_tenant, named_tenant

# The response headers naming the class a request was served as and its tenant's label
# (`telemetry.tenants`: the id, its hash, or `other`).
PRIORITY_APPLIED = "X-Gearbox-Priority"
TENANT_APPLIED = "X-Gearbox-Tenant"


@dataclass(frozen=True, slots=True)
class Rights:
    """Who may claim what (settings groups `server` and `admission`; `wiring.admission`)."""

    tenant_header: str = "x-gearbox-tenant"
    key_salt: bytes | None = None
    grants: Mapping[bytes, KeyGrant] = field(default_factory=dict)  # `key_digest` -> grant
    priority_header_trusted: bool = False  # ADMISSION_PRIORITY_HEADER_TRUSTED
    objective_trusted: bool = False  # gateway mode: the objective header is the gateway's


class Identity(NamedTuple):
    """A request's tenant (the id itself) and the priority class it is served as."""

    tenant: str
    priority: str
    klass: PriorityClass


def identify(headers: Mapping[str, str], policy: Policy, rights: Rights) -> Identity:
    """The request's tenant and class under `rights` (see the module docstring); a malformed
    tenant header that is read, or an unknown `X-Priority` class, is a 400 naming it."""
    token = bearer_token(headers)
    grant = None
    if token is not None and rights.grants:
        grant = rights.grants.get(key_digest(token))
    name = _priority(headers, policy, rights, grant)
    return Identity(_tenant(headers, rights, token, grant), name, policy.priorities[name])


def _tenant(
    headers: Mapping[str, str], rights: Rights, token: str | None, grant: KeyGrant | None
) -> str:
    if grant is None or grant.trusted_gateway:
        named = named_tenant(headers, rights.tenant_header)
        if named is not None:
            return named
    if grant is not None and grant.tenant is not None:
        return grant.tenant
    if token is not None:
        return key_tenant(token, rights.key_salt)
    return ANONYMOUS


def _priority(
    headers: Mapping[str, str], policy: Policy, rights: Rights, grant: KeyGrant | None
) -> str:
    """The class asked for when the request has the right to it, else its default."""
    gateway = grant is not None and grant.trusted_gateway
    default = policy.default_priority
    own = None if grant is None else grant.default_priority
    if own is not None and own in policy.priorities:  # a class the policy lacks: its default
        default = own
    objective = objective_class(headers, policy)
    if objective is not None and (rights.objective_trusted or gateway):
        default, objective = objective, None
    asked = asked_class(headers, policy) or objective
    if asked is None or asked == default:
        return default
    if gateway or rights.priority_header_trusted:
        return asked
    if grant is not None and asked in grant.priorities:
        return asked
    if at_most(policy.priorities[asked], policy.priorities[default]):
        return asked
    return default
