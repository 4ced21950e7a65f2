"""Connection failures in words a person can act on: an unknown host says it is unknown, a
refused connection says nothing listens, and a base URL ending in /v1 gets a hint."""

from __future__ import annotations

import os
from urllib.parse import urlsplit

import aiohttp


def connect_reason(err: aiohttp.ClientConnectionError) -> str:
    """'unknown host ...', 'connection refused', ...: the OS's words when it has any."""
    if isinstance(err, aiohttp.ClientConnectorDNSError):
        return f"unknown host {err.host!r} (the name does not resolve)"
    if isinstance(err, aiohttp.ClientConnectorError) and err.os_error.errno:
        return os.strerror(err.os_error.errno).lower()
    return str(err) or type(err).__name__


def v1_hint(url: str, flag: str) -> str:
    """A hint when `url` ends in /v1 (the tools add /v1/... themselves), else ''."""
    parts = urlsplit(url)
    if not parts.path.rstrip("/").endswith("/v1"):
        return ""
    base = url.rstrip("/").removesuffix("/v1")
    return f" ({flag} takes the server's base URL without /v1: try {base})"
