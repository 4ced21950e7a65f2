"""Progress display: tqdm bars on stderr for the CLI, a silent stand-in for tests and `--quiet`.

The runner only sees an `advance(n)` callable, so it never depends on how progress is shown.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Protocol

from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm


class Progress(Protocol):
    def bar(self, total: int, desc: str) -> AbstractContextManager[Callable[[int], object]]: ...


class TqdmProgress:
    """One tqdm bar per phase, written to stderr; the bar is removed when the phase ends."""

    @contextmanager
    def bar(self, total: int, desc: str) -> Iterator[Callable[[int], object]]:
        # disable=None: no bar when stderr is not a terminal (logs and CI stay readable);
        # log records go through tqdm.write meanwhile, so they do not break the bar's line.
        with (
            logging_redirect_tqdm(),
            tqdm(
                total=total, desc=desc, file=sys.stderr, leave=False, unit="req", disable=None
            ) as shown,
        ):
            yield shown.update


class SilentProgress:
    """No output; counts the steps so tests can check that progress was reported."""

    def __init__(self) -> None:
        self.steps = 0

    @contextmanager
    def bar(self, total: int, desc: str) -> Iterator[Callable[[int], object]]:
        def advance(n: int) -> None:
            self.steps += n

        yield advance
