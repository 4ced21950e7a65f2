"""Who sent a request: its tenant, what fair shares and per-tenant metrics count it as.

PURE. Where the tenant comes from, and which of those sources are trusted, is
`request/identity.py`'s concern (docs/data_plane.md, "Tenants, priorities and admission");
this module reads the candidates: a tenant named in a header (the configured
`ADMISSION_TENANT_HEADER`, default `x-gearbox-tenant`, then llm-d's
`x-llm-d-inference-fairness-id`), and a keyed hash of
the client's bearer key (`key-` + 12 hex digits; the raw key is never kept, logged or
exported). A named tenant is any printable text of 1-256 bytes (UTF-8), surrounding spaces
stripped, so the ids a gateway derives from a real principal (`auth0|5f3...`,
`john+ci@example.com`, `spiffe://cluster.local/ns/a/sa/b`) are accepted as they are; what
reaches a metric label is `telemetry.tenants`' bounded label, never a long or odd id.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

from data_plane.client_keys import MAX_TENANT_BYTES, tenant_id
from data_plane.errors import InvalidRequest

FAIRNESS_ID_HEADER = "x-llm-d-inference-fairness-id"  # llm-d's name for the same thing
ANONYMOUS = "anonymous"
KEY_PREFIX = "key-"
_KEY_HEX_DIGITS = 12  # 48 bits: collisions negligible below millions of keys
_DEFAULT_KEY = b"gearbox-tenant"  # the hash's key when ADMISSION_TENANT_KEY_SALT is unset


def key_tenant(api_key: str, salt: bytes | None) -> str:
    """The tenant of a bearer key: HMAC-SHA256 under `salt`, truncated (not reversible for a
    key of any real length; the same key and salt give the same tenant on every replica)."""
    raw = api_key.encode(errors="replace")  # a header's undecodable bytes: no 500
    digest = hmac.new(salt or _DEFAULT_KEY, raw, hashlib.sha256).hexdigest()
    return KEY_PREFIX + digest[:_KEY_HEX_DIGITS]


def bearer_token(headers: Mapping[str, str]) -> str | None:
    """The bearer token of the Authorization header, else None."""
    scheme, _, token = (headers.get("Authorization") or "").partition(" ")
    token = token.strip()
    if scheme.lower() == "bearer" and token:
        return token
    return None


def named_tenant(headers: Mapping[str, str], header: str) -> str | None:
    """The tenant `header`, else llm-d's fairness id, names (None: neither is present); a
    value that is not a tenant id is a 400 naming the header."""
    for name in (header, FAIRNESS_ID_HEADER):
        value = headers.get(name)
        if value is not None:
            tenant = tenant_id(value)
            if tenant is None:
                raise InvalidRequest(
                    f"{name} must be 1-{MAX_TENANT_BYTES} bytes of printable characters",
                    param=name,
                    code="invalid_tenant",
                )
            return tenant
    return None
