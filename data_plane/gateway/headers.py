"""The request headers Envoy sends in a `ProcessingRequest`, readable like a multidict.

Envoy lower-cases names and may send a repeated header as several entries; `getall` returns
them all, so `parse_budget` refuses a budget header repeated with different values.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any


class HeaderList(Mapping[str, str]):
    """name (lower case) -> first value; `getall` gives every value of a name."""

    __slots__ = ("_values",)

    def __init__(self, pairs: Sequence[tuple[str, str]]) -> None:
        self._values: dict[str, list[str]] = {}
        for name, value in pairs:
            self._values.setdefault(name.lower(), []).append(value)

    @classmethod
    def from_proto(cls, header_map: Any) -> HeaderList:
        """From an `envoy.config.core.v3.HeaderMap`: `raw_value` (bytes) when set, else `value`."""
        pairs = [
            (h.key, h.raw_value.decode("utf-8", "replace") if h.raw_value else h.value)
            for h in header_map.headers
        ]
        return cls(pairs)

    def __getitem__(self, name: str) -> str:
        return self._values[name.lower()][0]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def getall(self, name: str, default: Sequence[str] = ()) -> Sequence[str]:
        return self._values.get(name.lower(), default)
