"""API keys for engines behind `vllm serve --api-key` (docs/data_plane.md, "Engine API keys").

The key for an attempt is the keys file's entry for the endpoint id (`family@quantization#i`),
else for its pair (`family@quantization`), else its `"*"` entry, else
GEARBOX_DP_ENGINE_KEYS_API_KEY; none means no Authorization header. Keys come from the environment
or a file, are held as SecretStr (never logged, never in a routing table), and are checked
to be header-safe at startup. A client's own Authorization header is never sent to engines.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from pydantic import SecretStr

ANY_ENGINE = "*"


def check_key(key: str, where: str) -> None:
    """A key fits in one header value: printable ASCII, no spaces (never echoed back)."""
    if not key or not all("!" <= ch <= "~" for ch in key):
        raise ValueError(f"the key for {where} must be non-empty printable ASCII without spaces")


def read_keys_file(path: Path) -> dict[str, SecretStr]:
    """The file's JSON object {name: key}; ValueError names the problem, never a key."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise ValueError(f"cannot read {path}: {err.strerror}") from None
    except ValueError:
        raise ValueError(f"{path} is not a JSON document") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{path} must hold a JSON object of name -> key")
    keys = {}
    for name, key in doc.items():
        if not isinstance(key, str):
            raise ValueError(f"the key for {name!r} in {path} must be a string")
        check_key(key, repr(name))
        keys[name] = SecretStr(key)
    return keys


class EngineKeys:
    """The Authorization header value for an endpoint, or None."""

    __slots__ = ("_by_name", "_default")

    def __init__(self, by_name: Mapping[str, SecretStr], default: SecretStr | None) -> None:
        named = dict(by_name)
        fallback = named.pop(ANY_ENGINE, None) or default
        self._by_name = {n: f"Bearer {k.get_secret_value()}" for n, k in named.items()}
        self._default = None if fallback is None else f"Bearer {fallback.get_secret_value()}"

    @classmethod
    def load(cls, key: SecretStr | None, keys_file: Path | None) -> EngineKeys | None:
        """From the settings; None when no engine needs a key."""
        by_name = {} if keys_file is None else read_keys_file(keys_file)
        if key is None and not by_name:
            return None
        return cls(by_name, key)

    def authorization(self, endpoint_id: str, pair: str) -> str | None:
        found = self._by_name.get(endpoint_id) or self._by_name.get(pair)
        return found or self._default

    def __repr__(self) -> str:
        return f"EngineKeys({len(self._by_name)} named, default={self._default is not None})"
