"""The profiler's error tree: one clear, user-facing message per failure, no traceback needed.

`__main__` prints `error: <message>` for any `ProfilerError` and exits non-zero; everything
else is a bug and keeps its traceback.
"""

from __future__ import annotations


class ProfilerError(Exception):
    """A failure the user can act on; the message is complete on its own."""

    exit_code = 1


class InputError(ProfilerError):
    """Bad input: flags, eval sets, fleet files, reports. `problems` are `where: what` lines."""

    exit_code = 2

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        shown = problems[:20]
        hidden = len(problems) - len(shown)
        more = f"\n  ... and {hidden} more" if hidden else ""
        super().__init__("\n  ".join(shown) + more)


class EndpointError(ProfilerError):
    """An endpoint that cannot be profiled: unreachable, or not serving the model."""


class PushError(ProfilerError):
    """The control plane did not accept the report."""


class EngineMissingError(ProfilerError):
    """The in-process mode needs packages from the `engines` extra."""
