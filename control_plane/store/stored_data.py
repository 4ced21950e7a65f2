"""The error raised when data found in Redis does not validate (written by hand or by a newer
incompatible version); the admin API maps it to 409, the CLI to a one-line error."""

from __future__ import annotations


class StoredDataError(ValueError):
    """Something stored in Redis is invalid; the message names the key and the fields."""
