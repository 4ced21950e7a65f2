"""Who may do what: the admin token guards every control-plane write (compared in constant
time), client API keys guard the data plane when enabled, and no answer or log line echoes a
token, a key or the Redis password."""

from __future__ import annotations

import ast
import inspect
import logging
from pathlib import Path
from types import ModuleType
from typing import Any

import aiohttp
import pytest
from pydantic import SecretStr

import control_plane.app
import data_plane.serving.middleware
from tests.reliability.conftest import ADMIN_TOKEN, StartDataPlane, cp_settings
from tests.reliability.stack import chat_body, dp_settings
from tests.security.conftest import REDIS_PASSWORD
from tests.security.live import LiveStack
from tests.support.redis_server import RedisProcess
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

WRONG_TOKEN = "not-the-admin-token-but-long-enough-42"
PATH_VALUES = {"{pair}": "llama-3.1-8b-instruct@fp8", "{version}": "1"}
API_KEYS = ("client-key-alpha-0001", "client-key-bravo-0002")


def write_operations(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """(METHOD, path) of every operation the document says needs the bearer token."""
    found = []
    for template, operations in doc["paths"].items():
        path = template
        for placeholder, value in PATH_VALUES.items():
            path = path.replace(placeholder, value)
        found += [(m.upper(), path) for m, op in operations.items() if op.get("security")]
    return found


def assert_envelope(body: Any) -> None:
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"message", "type", "param", "code"}, body


async def test_admin_writes_are_refused_without_the_token(stack: LiveStack) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.get(stack.control_plane + "/openapi.json") as resp:
            doc = await resp.json()
        writes = write_operations(doc)
        assert {("POST", "/v1/profiles"), ("POST", "/v1/tables")} <= set(writes)

        async def state() -> list[Any]:
            out = []
            for path in ("/v1/profiles", "/v1/tables", "/v1/policy"):
                async with session.get(stack.control_plane + path) as resp:
                    out.append(await resp.json())
            return out

        before = await state()
        bad_auth: list[dict[str, str]] = [
            {},
            {"Authorization": f"Bearer {WRONG_TOKEN}"},
            {"Authorization": f"Basic {ADMIN_TOKEN}"},
            {"Authorization": f"Bearer{ADMIN_TOKEN}"},
            {"Authorization": f"Bearer {ADMIN_TOKEN[:-1]}"},
            {"Authorization": "Bearer "},
            {"X-Admin-Token": ADMIN_TOKEN},
        ]
        for method, path in writes:
            for headers in bad_auth:
                async with session.request(
                    method, stack.control_plane + path, json={"version": 1}, headers=headers
                ) as resp:
                    body = await resp.json()
                    assert resp.status == 401, (method, path, headers, body)
                    assert_envelope(body)
                    assert resp.headers["WWW-Authenticate"].startswith("Bearer")
                    text = str(body) + str(dict(resp.headers))
                    assert WRONG_TOKEN not in text
                    assert ADMIN_TOKEN[:-1] not in text
        assert await state() == before  # nothing was written


def _compares_secret(node: ast.Compare) -> bool:
    names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    names |= {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}
    return any(w in name.lower() for name in names for w in ("token", "key", "given", "secret"))


@pytest.mark.parametrize("module", [control_plane.app, data_plane.serving.middleware])
def test_secrets_are_compared_in_constant_time(module: ModuleType) -> None:
    tree = ast.parse(inspect.getsource(module))
    calls = [
        n.func
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
    ]
    assert any(
        f.attr == "compare_digest"
        and isinstance(f.value, ast.Name)
        and f.value.id in ("hmac", "secrets")
        for f in calls
    ), f"{module.__name__} does not use hmac/secrets.compare_digest"
    plain = [
        ast.unparse(n)
        for n in ast.walk(tree)
        if isinstance(n, ast.Compare)
        and any(isinstance(op, ast.Eq | ast.NotEq | ast.In | ast.NotIn) for op in n.ops)
        and _compares_secret(n)
    ]
    assert plain == [], f"secrets compared with ==/in in {module.__name__}: {plain}"


def test_settings_never_print_their_secrets(secure_redis: RedisProcess, tmp_path: Path) -> None:
    cp = cp_settings(secure_redis.url, "x")
    dp = dp_settings(
        secure_redis.url, "x", tmp_path / "s.json", api_keys=tuple(SecretStr(k) for k in API_KEYS)
    )
    for text in (repr(cp), str(cp), repr(dp), str(dp)):
        assert ADMIN_TOKEN not in text
        assert not any(k in text for k in API_KEYS)


async def test_client_api_keys_are_enforced_when_enabled(
    secure_redis: RedisProcess,
    stack: LiveStack,
    tmp_path: Path,
    start_data_plane: StartDataPlane,
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = dp_settings(
        secure_redis.url,
        "sec",  # the stack's prefix: this plane follows the same published table
        tmp_path / "snapshot.json",
        api_keys=tuple(SecretStr(k) for k in API_KEYS),
    )
    caplog.set_level(logging.DEBUG)
    plane = await start_data_plane(settings)
    await eventually(lambda: plane.version == stack.table_version, what="table loaded")
    async with aiohttp.ClientSession() as session:

        async def chat(headers: dict[str, str]) -> tuple[int, Any]:
            async with session.post(
                plane.url + "/v1/chat/completions", json=chat_body(), headers=headers
            ) as resp:
                return resp.status, await resp.json()

        for headers in (
            {},
            {"Authorization": "Bearer client-key-charlie-003"},
            {"Authorization": f"Basic {API_KEYS[0]}"},
            {"Authorization": f"Bearer {API_KEYS[0]}x"},
            {"X-Api-Key": API_KEYS[0]},
        ):
            status, body = await chat(headers)
            assert status == 401, (headers, body)
            assert_envelope(body)
            assert body["error"]["code"] == "invalid_api_key"
            assert not any(k in str(body) for k in (*API_KEYS, "client-key-charlie-003"))
        for key in API_KEYS:
            status, body = await chat({"Authorization": f"Bearer {key}"})
            assert status == 200, body
        async with session.get(plane.url + "/v1/models") as resp:
            assert resp.status == 401
        for probe in ("/healthz", "/readyz", "/metrics"):  # probes and scrapes stay open
            async with session.get(plane.url + probe) as resp:
                assert resp.status == 200, probe
    logged = caplog.text
    assert not any(s in logged for s in (*API_KEYS, REDIS_PASSWORD, "client-key-charlie-003"))
