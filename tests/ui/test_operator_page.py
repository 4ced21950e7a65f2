"""The operator page in headless chromium against a real stack: it loads, the chart renders,
the explainer answers, live state shows and refreshes, and rollback needs the typed token."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis.asyncio as aioredis

from contracts.live_state import ClassCounters
from contracts.redis_keys import RedisKeys
from tests.support.redis_server import RedisProcess
from tests.ui.browser import Browser
from tests.ui.conftest import SCREENSHOT_DIR
from tests.ui.stack import (
    ADMIN,
    ADMIN_TOKEN,
    ServerFactory,
    Stack,
    client,
    example_reports,
    start_stack,
    write_state,
)

pytestmark = pytest.mark.integration
SERVED = {
    "llama-3.1-8b-instruct@fp8",
    "llama-3.1-8b-instruct@fp16",
    "llama-3.1-8b-instruct@awq-int4",
    "llama-3.1-70b-instruct@fp8",
    "llama-3.1-70b-instruct@awq-int4",
}
PRUNED = {"llama-3.1-8b-instruct@int8-w8a8"}
OPEN_ENDPOINT = "llama-3.1-8b-instruct@fp8#1"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


async def _open(browser: Browser, stack: Stack) -> None:
    await browser.navigate(f"{stack.cp_url}/ui")
    await browser.wait_for("document.body.dataset.ready === 'true'")


async def _texts(browser: Browser, selector: str, attribute: str | None = None) -> list[str]:
    read = f"e.getAttribute({json.dumps(attribute)})" if attribute else "e.textContent.trim()"
    found: list[str] = await browser.evaluate(
        f"[...document.querySelectorAll({json.dumps(selector)})].map(e => {read})"
    )
    return found


async def _second_instance(stack: Stack, breaker: str = "open") -> None:
    """Another data-plane instance that sees fp8#1 with an open breaker."""
    await write_state(
        stack.redis,
        stack.keys,
        "ui-dp-b",
        {
            "llama-3.1-8b-instruct@fp8#0": ("llama-3.1-8b-instruct@fp8", "closed", 2),
            OPEN_ENDPOINT: ("llama-3.1-8b-instruct@fp8", breaker, 0),  # type: ignore[dict-item]
        },
        {"llama-3.1-8b-instruct@fp8": 30, "llama-3.1-70b-instruct@fp8": 10},
        stack.version,
        fallbacks=3,
    )


async def test_page_loads_with_table_chart_and_live_state(stack: Stack, browser: Browser) -> None:
    await _second_instance(stack)
    await _open(browser, stack)
    assert await browser.evaluate("document.title") == "Gearbox operator"
    assert await browser.evaluate("document.getElementById('table-version').textContent") == (
        f"current v{stack.version}"
    )
    # One row per pair, pruned ones marked.
    assert set(await _texts(browser, "#pairs-table tbody tr", "data-pair")) == SERVED | PRUNED
    assert set(await _texts(browser, "#pairs-table tbody tr.pruned", "data-pair")) == PRUNED
    # The chart: one SVG point per pair, the pruned one drawn differently, a frontier marked.
    points = await _texts(browser, "#frontier svg circle.point", "data-pair")
    assert sorted(points) == sorted(SERVED | PRUNED)
    assert await _texts(browser, "#frontier svg circle.point.pruned", "data-pair") == sorted(PRUNED)
    frontier = set(await _texts(browser, "#frontier svg circle.point.frontier", "data-pair"))
    assert frontier
    assert frontier <= SERVED
    # Intervals: an error bar per served pair, counts and bounds in the table's cells.
    assert set(await _texts(browser, "#frontier svg g.error-bar", "data-pair")) == SERVED
    cell = await browser.evaluate(
        "document.querySelector('#pairs-table tbody "
        'tr[data-pair="llama-3.1-8b-instruct@awq-int4"] td.selected .interval\').textContent'
    )
    assert cell.startswith(" 246/300 [0.788, 0.")  # chat, the default category
    # Live state: both instances, and the breaker the second one reports open.
    await browser.wait_for(
        f"document.querySelector('#live-endpoints tr[data-endpoint=\"{OPEN_ENDPOINT}\"]')"
    )
    breaker = await browser.evaluate(
        f"document.querySelector('#live-endpoints tr[data-endpoint=\"{OPEN_ENDPOINT}\"] .breaker')"
        ".textContent"
    )
    assert breaker == "open"
    assert set(await _texts(browser, "#live-instances tbody tr", "data-instance")) == {
        "ui-dp",
        "ui-dp-b",
    }
    png = await browser.screenshot(SCREENSHOT_DIR / "operator-page.png")
    assert png.startswith(PNG_MAGIC)
    assert len(png) > 20_000
    page_text = await browser.evaluate("document.body.innerText")
    assert "svc.cluster.local" not in page_text  # endpoint URLs are never shown
    assert browser.log.errors == []
    assert browser.log.requested, "the page made no requests"
    assert all(url.startswith(stack.cp_url) for url in browser.log.requested), browser.log.requested


async def test_live_rows_per_priority_class_and_tenant(stack: Stack, browser: Browser) -> None:
    batch = ClassCounters(requests=40, shed=4, budget_met=30, budget_missed=6, cost_usd=0.5)
    queue = {"queued": 12, "waiting": 3, "queue_refused": {"deadline": 2, "queue_full": 1}}
    classes = (
        {"team-a": batch.model_copy(update={"queued": 12})},
        {"batch": batch.model_copy(update=queue), "critical": ClassCounters(requests=5)},
    )
    await write_state(stack.redis, stack.keys, "ui-dp-c", {}, {}, stack.version, classes=classes)
    await _open(browser, stack)
    await browser.wait_for("document.querySelector('#live-priorities tr[data-priority=\"batch\"]')")
    assert await _texts(browser, "#live-priorities tbody tr", "data-priority") == [
        "batch",
        "critical",
    ]
    shed = await _texts(browser, '#live-priorities tr[data-priority="batch"] td.shed')
    assert shed == ["4 (10.0%)"]
    assert await _texts(browser, "#live-tenants tbody tr", "data-tenant") == ["team-a"]
    # the queue (docs/data_plane.md, "Flow control"): waited, waiting now, refused by reason
    row = '#live-priorities tr[data-priority="batch"]'
    assert await _texts(browser, f"{row} td.queued") == ["12"]
    assert await _texts(browser, f"{row} td.waiting") == ["3"]
    assert await _texts(browser, f"{row} td.queue-refused") == ["3"]
    assert await _texts(browser, f"{row} td.queue-refused", "title") == ["2 deadline, 1 queue_full"]
    assert await _texts(browser, '#live-tenants tr[data-tenant="team-a"] td.queued') == ["12"]
    assert browser.log.errors == []


async def _dp_route(stack: Stack, body: dict[str, Any], headers: dict[str, str]) -> Any:
    async with (
        client() as session,
        session.post(f"{stack.dp_url}/v1/route", json=body, headers=headers) as resp,
    ):
        return await resp.json()


async def test_explainer_answers_with_the_data_planes_decision(
    stack: Stack, browser: Browser
) -> None:
    prompt = "Extract the invoice number and the total from this email as JSON."
    await _open(browser, stack)
    await browser.type_into("#admin-token", ADMIN_TOKEN)  # the explainer always needs it
    await browser.type_into("#f-prompt", prompt)
    await browser.type_into("#f-latency", "8000")
    await browser.type_into("#f-accuracy", "0.85")
    await browser.click("#explain-submit")
    await browser.wait_for("document.getElementById('explain-pair')")
    expected = await _dp_route(
        stack,
        {"model": "auto", "messages": [{"role": "user", "content": prompt}]},
        {"X-Latency-Budget-Ms": "8000", "X-Min-Accuracy": "0.85"},
    )
    assert expected["routed"] is True
    shown = await browser.evaluate("document.getElementById('explain-pair').textContent")
    assert shown == f"→ {expected['pair']}"
    summary = await browser.evaluate("document.getElementById('explain-summary').textContent")
    assert summary == expected["summary"]
    assert await _texts(browser, "#explain-candidates tbody tr", "data-pair") == [
        c["pair"] for c in expected["candidates"]
    ]
    await browser.screenshot(SCREENSHOT_DIR / "operator-explainer.png")
    assert browser.log.errors == []


async def test_explainer_shows_no_route_in_words(stack: Stack, browser: Browser) -> None:
    await _open(browser, stack)
    await browser.type_into("#admin-token", ADMIN_TOKEN)
    await browser.type_into("#f-latency", "1")
    await browser.evaluate("document.getElementById('f-mode').value = 'strict'")
    await browser.click("#explain-submit")
    await browser.wait_for("document.getElementById('explain-pair')")
    shown = await browser.evaluate("document.getElementById('explain-pair').textContent")
    assert shown == "No route (budget_infeasible)"
    summary = await browser.evaluate("document.getElementById('explain-summary').textContent")
    assert summary.startswith("No route:")
    rejected = set(await _texts(browser, "#explain-rejected tbody tr", "data-pair"))
    assert rejected == SERVED


async def test_explainer_sends_the_data_plane_api_key_typed_in(
    aiohttp_server: ServerFactory,
    redis_server: RedisProcess,
    redis_client: aioredis.Redis,
    redis_keys: RedisKeys,
    browser: Browser,
) -> None:
    key = "ui-data-plane-key-0123"
    stack = await start_stack(
        aiohttp_server,
        redis_server.url,
        redis_client,
        redis_keys,
        example_reports(),
        dp={"api_keys": (key,)},
    )
    await _open(browser, stack)
    await browser.type_into("#admin-token", ADMIN_TOKEN)
    await browser.click("#explain-submit")
    await browser.wait_for("document.getElementById('explain-error')")
    error = await browser.evaluate("document.getElementById('explain-error').textContent")
    assert error.startswith("401 invalid_api_key")
    await browser.type_into("#f-api-key", key)
    await browser.click("#explain-submit")
    await browser.wait_for("document.getElementById('explain-pair')")
    assert (
        await browser.evaluate("document.getElementById('explain-pair').textContent")
    ).startswith("→ ")


async def test_category_switch_redraws_the_chart(stack: Stack, browser: Browser) -> None:
    await _open(browser, stack)
    await browser.evaluate(
        "(() => { const s = document.getElementById('category'); s.value = 'code';"
        " s.dispatchEvent(new Event('change')); })()"
    )
    assert await browser.evaluate("document.querySelector('#frontier svg').dataset.category") == (
        "code"
    )
    assert len(await _texts(browser, "#frontier svg circle.point", "data-pair")) == 6
    selected = await _texts(browser, "#pairs-table thead th.selected")
    assert selected == ["code acc · right/n [bounds] · utility"]


async def test_live_state_refreshes_without_reload(stack: Stack, browser: Browser) -> None:
    await _second_instance(stack, breaker="open")
    await _open(browser, stack)
    selector = f'#live-endpoints tr[data-endpoint="{OPEN_ENDPOINT}"] .breaker'
    await browser.wait_for(
        f"document.querySelector({json.dumps(selector)})?.textContent === 'open'"
    )
    await _second_instance(stack, breaker="half_open")
    await browser.wait_for(
        f"document.querySelector({json.dumps(selector)})?.textContent === 'half-open'",
        timeout_s=30,
    )


async def _publish_second_version(stack: Stack) -> int:
    async with client(ADMIN) as session:
        async with session.get(f"{stack.cp_url}/v1/policy") as resp:
            policy = await resp.json()
        policy["utility_weights"]["latency"] = 0.5
        async with session.put(f"{stack.cp_url}/v1/policy", json=policy) as resp:
            assert resp.status == 200, await resp.text()
        async with session.post(f"{stack.cp_url}/v1/tables") as resp:
            assert resp.status == 201, await resp.text()
            version: int = (await resp.json())["version"]
    return version


async def _confirm_rollback(browser: Browser, button: str) -> None:
    """Click, wait until the button asks for confirmation, click again."""
    await browser.click(button)
    await browser.wait_for(
        f"document.querySelector({json.dumps(button)}).textContent.startsWith('confirm')"
    )
    await browser.click(button)


async def _current(stack: Stack) -> int:
    raw = await stack.redis.get(stack.keys.table_current)
    assert raw is not None
    return int(raw)


async def test_rollback_needs_the_typed_admin_token(stack: Stack, browser: Browser) -> None:
    second = await _publish_second_version(stack)
    await _open(browser, stack)
    first_row = f'#history-table tr[data-version="{stack.version}"] button[data-action="rollback"]'
    # Without a token: the admin API refuses and the page says so.
    await _confirm_rollback(browser, first_row)
    await browser.wait_for("document.getElementById('banner').textContent.includes('failed')")
    assert "bearer token" in await browser.evaluate("document.getElementById('banner').textContent")
    assert await _current(stack) == second
    # With the token typed in: the pointer moves and the page follows.
    await browser.type_into("#admin-token", ADMIN_TOKEN)
    await _confirm_rollback(browser, first_row)
    await browser.wait_for(
        f"document.getElementById('table-version').textContent === 'current v{stack.version}'"
    )
    assert await _current(stack) == stack.version
