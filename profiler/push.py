"""Push reports to the control plane admin API: `POST {url}/v1/profiles` with a bearer token.

Adapter: one request per report; any failure becomes one `PushError` naming the URL and the
control plane's own message.
"""

from __future__ import annotations

import asyncio
import json

import aiohttp

from contracts.profile_report import ProfileReport
from profiler.client import error_message
from profiler.errors import PushError


async def push_report(
    session: aiohttp.ClientSession,
    url: str,
    token: str,
    report: ProfileReport,
    timeout_s: float = 30.0,
) -> str:
    """Send one report; returns the control plane's answer text (e.g. the stored id)."""
    target = f"{url.rstrip('/')}/v1/profiles"
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    body = json.dumps(report.model_dump(mode="json"))
    try:
        async with (
            asyncio.timeout(timeout_s),
            session.post(target, data=body, headers=headers) as resp,
        ):
            payload = await resp.read()
    except TimeoutError as err:
        raise PushError(f"push to {target}: no answer within {timeout_s:g}s") from err
    except aiohttp.ClientError as err:
        raise PushError(f"push to {target} failed: {err}") from err
    if resp.status >= 300:
        raise PushError(f"push to {target}: HTTP {resp.status}: {error_message(payload)}")
    return payload.decode(errors="replace").strip()
