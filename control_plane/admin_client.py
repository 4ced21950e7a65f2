"""A small client of the admin API (used by `push` and the demo). Adapter over aiohttp."""

from __future__ import annotations

from typing import Any

import aiohttp

from contracts.routing_table import RoutingTable

DEFAULT_TIMEOUT = aiohttp.ClientTimeout(total=60, sock_connect=5, sock_read=30)


class AdminApiError(Exception):
    """The API answered with an error envelope (or something that was not JSON)."""

    def __init__(self, status: int, message: str, code: str | None = None) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.code = code


class AdminClient:
    def __init__(self, session: aiohttp.ClientSession, base_url: str, token: str) -> None:
        self._session = session
        self._base = base_url.rstrip("/")
        self._auth = {"Authorization": f"Bearer {token}"}

    async def _call(self, method: str, path: str, body: bytes | None = None) -> Any:
        headers = {**self._auth, "Content-Type": "application/json"}
        async with self._session.request(
            method, self._base + path, data=body, headers=headers, timeout=DEFAULT_TIMEOUT
        ) as resp:
            text = await resp.text()
            try:
                data = await resp.json(content_type=None) if text else None
            except ValueError:
                data = None
            if resp.status >= 400:
                error = data.get("error", {}) if isinstance(data, dict) else {}
                message = error.get("message") or text[:200] or resp.reason or "error"
                raise AdminApiError(resp.status, str(message), error.get("code"))
            return data

    async def push_report(self, body: bytes) -> dict[str, Any]:
        """POST /v1/profiles; returns {"pair", "created", "report_sha256"}."""
        result: dict[str, Any] = await self._call("POST", "/v1/profiles", body)
        return result

    async def put_policy(self, body: bytes) -> dict[str, Any]:
        result: dict[str, Any] = await self._call("PUT", "/v1/policy", body)
        return result

    async def rebuild(self) -> dict[str, Any]:
        result: dict[str, Any] = await self._call("POST", "/v1/tables")
        return result

    async def rollback(self, version: int) -> dict[str, Any]:
        body = f'{{"version": {int(version)}}}'.encode()
        result: dict[str, Any] = await self._call("POST", "/v1/tables/rollback", body)
        return result

    async def current_table(self) -> RoutingTable:
        return RoutingTable.model_validate(await self._call("GET", "/v1/tables/current"))

    async def history(self) -> dict[str, Any]:
        result: dict[str, Any] = await self._call("GET", "/v1/tables")
        return result
