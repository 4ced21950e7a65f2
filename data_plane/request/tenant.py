"""Who sent a request: its tenant, a label for metrics and fair shares, never an identity check.

PURE. The tenant is, in order: the configured tenant header (`TENANT_HEADER`, default
`x-gearbox-tenant`), llm-d's `x-llm-d-inference-fairness-id`, a keyed hash of the client's
bearer key (`key-` + 12 hex digits; the raw key is never kept, logged or exported), else
`anonymous`. Trust model (docs/data_plane.md, "Tenants, priorities and admission"): a client
may name any tenant in the header; the router authenticates API keys, not tenants, so a
deployment that must stop one tenant posing as another sets the header at its own gateway
and drops the client's copy.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping

from data_plane.errors import InvalidRequest

FAIRNESS_ID_HEADER = "x-llm-d-inference-fairness-id"  # llm-d's name for the same thing
ANONYMOUS = "anonymous"
KEY_PREFIX = "key-"
_KEY_HEX_DIGITS = 12  # 48 bits: collisions negligible below millions of keys
_TENANT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,63}$")
_DEFAULT_KEY = b"gearbox-tenant"  # the hash's key when TENANT_KEY_SALT is unset


def key_tenant(api_key: str, salt: bytes | None) -> str:
    """The tenant of a bearer key: HMAC-SHA256 under `salt`, truncated (not reversible for a
    key of any real length; the same key and salt give the same tenant on every replica)."""
    digest = hmac.new(salt or _DEFAULT_KEY, api_key.encode(), hashlib.sha256).hexdigest()
    return KEY_PREFIX + digest[:_KEY_HEX_DIGITS]


def tenant_of(headers: Mapping[str, str], header: str, salt: bytes | None) -> str:
    """The request's tenant (see the module docstring); a named tenant that is not 1-64
    letters, digits or `._:@-` is a 400 naming the header."""
    for name in (header, FAIRNESS_ID_HEADER):
        value = headers.get(name)
        if value is not None:
            value = value.strip()
            if not _TENANT.match(value):
                raise InvalidRequest(
                    f"{name} must be 1-64 letters, digits or '._:@-', starting with a letter "
                    "or digit",
                    param=name,
                    code="invalid_tenant",
                )
            return value
    scheme, _, token = (headers.get("Authorization") or "").partition(" ")
    token = token.strip()
    if scheme.lower() == "bearer" and token:
        return key_tenant(token, salt)
    return ANONYMOUS
