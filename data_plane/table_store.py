"""Holds the compiled routing table being served; swapped atomically, read once per request.

No I/O and no awaits: a swap is one attribute assignment, so a request that read `current`
keeps using that object for every retry while the next request sees the new table.
"""

from __future__ import annotations

from collections.abc import Callable

from data_plane.domain import CompiledTable

SwapListener = Callable[[CompiledTable], None]


class TableStore:
    """The current CompiledTable (None until the first load) and who to tell when it changes."""

    __slots__ = ("_created_at_s", "_current", "_listeners")

    def __init__(self) -> None:
        self._current: CompiledTable | None = None
        self._created_at_s = 0.0
        self._listeners: list[SwapListener] = []

    @property
    def current(self) -> CompiledTable | None:
        return self._current

    @property
    def created_at_s(self) -> float:
        """Unix time the served table was built by the control plane (0 before the first)."""
        return self._created_at_s

    @property
    def version(self) -> int | None:
        return None if self._current is None else self._current.version

    def on_swap(self, listener: SwapListener) -> None:
        """Call `listener(table)` after every swap (metrics, breaker pruning); must not raise."""
        self._listeners.append(listener)

    def swap(self, table: CompiledTable, created_at_s: float = 0.0) -> CompiledTable | None:
        """Serve `table` from now on; returns the table it replaced."""
        previous, self._current = self._current, table
        self._created_at_s = created_at_s
        for listener in self._listeners:
            listener(table)
        return previous
