"""A small client of the control plane's admin API, as an operator's script would use it."""

from __future__ import annotations

from typing import Any

import aiohttp

from contracts.profile_report import ProfileReport


class AdminClient:
    def __init__(self, session: aiohttp.ClientSession, url: str, token: str) -> None:
        self.session = session
        self.url = url
        self.auth = {"Authorization": f"Bearer {token}"}

    async def call(
        self, method: str, path: str, body: Any = None, auth: bool = True
    ) -> tuple[int, dict[str, str], Any]:
        """(status, headers, JSON body or text) of one request."""
        headers = self.auth if auth else {}
        async with self.session.request(
            method, self.url + path, json=body, headers=headers
        ) as resp:
            if resp.content_type == "application/json":
                data: Any = await resp.json()
            else:
                data = await resp.text()
            return resp.status, dict(resp.headers), data

    async def push(self, report: ProfileReport) -> int:
        status, _, body = await self.call("POST", "/v1/profiles", report.model_dump(mode="json"))
        assert status in (200, 201), body
        return status

    async def publish(self) -> tuple[int, dict[str, str], Any]:
        return await self.call("POST", "/v1/tables")

    async def history(self) -> tuple[int | None, list[int]]:
        """(current version, kept versions newest first)."""
        status, _, body = await self.call("GET", "/v1/tables")
        assert status == 200, body
        return body["current"], [v["version"] for v in body["versions"]]

    async def metric(self, name: str) -> float | None:
        """One unlabelled sample from /metrics (None when absent)."""
        status, _, text = await self.call("GET", "/metrics", auth=False)
        assert status == 200
        for line in str(text).splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return None
