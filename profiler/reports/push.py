"""Push reports to the control plane admin API: `POST {url}/v1/profiles` with a bearer token.

Adapter: one request per report; any failure becomes one `PushError` naming the URL and the
control plane's own message.
"""

from __future__ import annotations

import asyncio
import json

import aiohttp

from contracts.profile_report import ProfileReport
from profiler.engine.client import error_message
from profiler.engine.connect_words import connect_reason, v1_hint
from profiler.errors import PushError


async def check_push_target(
    session: aiohttp.ClientSession, url: str, token: str, timeout_s: float = 10.0
) -> None:
    """Before any measuring: the control plane answers at `url` and accepts `token`
    (`POST /v1/auth/check`, an authenticated no-op). Raises one PushError in words."""
    target = f"{url.rstrip('/')}/v1/auth/check"
    try:
        async with (
            asyncio.timeout(timeout_s),
            session.post(target, headers={"Authorization": f"Bearer {token}"}) as resp,
        ):
            payload = await resp.read()
    except TimeoutError as err:
        raise PushError(f"--push {url}: no answer within {timeout_s:g}s") from err
    except aiohttp.ClientConnectionError as err:
        raise PushError(f"--push {url}: cannot connect: {connect_reason(err)}") from err
    except aiohttp.ClientError as err:
        raise PushError(f"--push {url}: {err}") from err
    if resp.status in (401, 403):
        raise PushError(
            f"--push {url}: the control plane refused the token (HTTP {resp.status}: "
            f"{error_message(payload)}); check --token or GEARBOX_PROF_CONTROL_PLANE_TOKEN"
        )
    if resp.status >= 300:
        raise PushError(
            f"--push {url}: HTTP {resp.status} for {target}; is it a Gearbox control plane?"
            + v1_hint(url, "--push")
        )


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
    except aiohttp.ClientConnectionError as err:
        raise PushError(f"push to {target} failed: {connect_reason(err)}") from err
    except aiohttp.ClientError as err:
        raise PushError(f"push to {target} failed: {err}") from err
    if resp.status >= 300:
        raise PushError(f"push to {target}: HTTP {resp.status}: {error_message(payload)}")
    return payload.decode(errors="replace").strip()
