"""Client API keys and what each may claim (docs/data_plane.md, "Tenants, priorities and
admission").

`API_KEYS` (environment, comma-separated) lists plain keys: each is its own tenant (`key-` +
its keyed hash) with the policy's default class, which it may only lower. `API_KEYS_FILE` is a
JSON list whose entries are either such a plain key (a string) or an object:

    {"key": "<bearer key>", "tenant": "acme", "priorities": ["critical", "standard"],
     "default_priority": "standard", "trusted_gateway": false}

every field but `key` optional: `tenant` (1-256 bytes of printable text; default the key's
hash), `priorities` (the classes above its default it may ask for with `X-Priority`),
`default_priority` (must be one of `priorities` when both are given; a class the served policy
lacks falls back to the policy's default), `trusted_gateway` (its tenant and priority headers
speak for the principal behind it). A bad file fails at startup with the entry's position and
field named, never a key. Keys are held as SecretStr and compared in constant time
(`serving.middleware.ApiKeys`); the grants are looked up by the key's SHA-256.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from data_plane.engine_keys import check_key

MIN_KEY_CHARS = 8
MAX_TENANT_BYTES = 256
_CLASS = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")  # contracts.policy.PriorityName
_FIELDS = frozenset({"key", "tenant", "priorities", "default_priority", "trusted_gateway"})


@dataclass(frozen=True, slots=True)
class KeyGrant:
    """What one API key may claim (`API_KEYS_FILE`; a key of `API_KEYS` gets the defaults)."""

    tenant: str | None = None  # None: `key-` + the key's keyed hash
    priorities: frozenset[str] = frozenset()  # classes above its default it may ask for
    default_priority: str | None = None  # None: the policy's `default_priority`
    trusted_gateway: bool = False  # its tenant and priority headers are trusted


PLAIN_KEY = KeyGrant()


def tenant_id(value: str) -> str | None:
    """`value` stripped when it is a tenant id (1-256 bytes of printable text), else None:
    the one rule for a tenant named by a header or by the keys file."""
    value = value.strip()
    # isprintable first: a header's undecodable bytes (lone surrogates) are not printable.
    if not value or not value.isprintable() or len(value.encode()) > MAX_TENANT_BYTES:
        return None
    return value


def key_digest(key: str) -> bytes:
    """What grants are looked up by: SHA-256 of the key (the raw key is not kept here). A
    header's undecodable bytes are replaced: such a token matches no key (keys are ASCII)."""
    return hashlib.sha256(key.encode(errors="replace")).digest()


def check_client_key(key: str, where: str) -> None:
    """A client key is >= 8 printable ASCII characters without spaces (never echoed)."""
    check_key(key, where)
    if len(key) < MIN_KEY_CHARS:
        raise ValueError(f"{where}: each API key must be at least {MIN_KEY_CHARS} characters")


def read_client_keys(path: Path) -> list[tuple[SecretStr, KeyGrant]]:
    """The file's keys and grants; ValueError names the file, the entry and the field."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise ValueError(f"cannot read {path}: {err.strerror}") from None
    except ValueError:
        raise ValueError(f"{path} is not a JSON document") from None
    if not isinstance(doc, list):
        raise ValueError(f"{path} must hold a JSON list of keys or key objects")
    found: list[tuple[SecretStr, KeyGrant]] = []
    seen: set[bytes] = set()
    for i, entry in enumerate(doc):
        where = f"{path} entry {i}"
        key, grant = _entry(entry, where)
        if key_digest(key) in seen:
            raise ValueError(f"{where}: the same key appears twice")
        seen.add(key_digest(key))
        found.append((SecretStr(key), grant))
    return found


def _entry(entry: Any, where: str) -> tuple[str, KeyGrant]:
    if isinstance(entry, str):
        check_client_key(entry, where)
        return entry, PLAIN_KEY
    if not isinstance(entry, dict):
        raise ValueError(f"{where} must be a key (string) or an object with a 'key'")
    unknown = sorted(set(entry) - _FIELDS)
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {unknown}; known: {sorted(_FIELDS)}")
    key = entry.get("key")
    if not isinstance(key, str):
        raise ValueError(f"{where}.key must be a string")
    check_client_key(key, f"{where}.key")
    return key, _grant(entry, where)


def _grant(entry: Mapping[str, Any], where: str) -> KeyGrant:
    tenant = entry.get("tenant")
    if tenant is not None and (not isinstance(tenant, str) or tenant_id(tenant) is None):
        raise ValueError(f"{where}.tenant must be 1-256 bytes of printable text")
    classes = entry.get("priorities", [])
    if not isinstance(classes, list) or not all(
        isinstance(c, str) and _CLASS.match(c) for c in classes
    ):
        raise ValueError(f"{where}.priorities must be a list of priority class names")
    default = entry.get("default_priority")
    if default is not None and (not isinstance(default, str) or not _CLASS.match(default)):
        raise ValueError(f"{where}.default_priority must be a priority class name")
    if default is not None and classes and default not in classes:
        raise ValueError(f"{where}.default_priority {default!r} is not in its priorities")
    gateway = entry.get("trusted_gateway", False)
    if not isinstance(gateway, bool):
        raise ValueError(f"{where}.trusted_gateway must be true or false")
    return KeyGrant(
        None if tenant is None else tenant_id(tenant), frozenset(classes), default, gateway
    )


def client_keys(
    plain: Iterable[SecretStr], keys_file: Path | None
) -> list[tuple[SecretStr, KeyGrant]]:
    """Every client key with its grant: `API_KEYS` (plain), then the file's entries (a key in
    both gets the file's grant)."""
    by_digest = {key_digest(k.get_secret_value()): (k, PLAIN_KEY) for k in plain}
    if keys_file is not None:
        for key, grant in read_client_keys(keys_file):
            by_digest[key_digest(key.get_secret_value())] = (key, grant)
    return list(by_digest.values())


def grants_of(keys: Iterable[tuple[SecretStr, KeyGrant]]) -> dict[bytes, KeyGrant]:
    """The grants by `key_digest` (what `request.identity.Rights.grants` holds)."""
    return {key_digest(k.get_secret_value()): grant for k, grant in keys}
