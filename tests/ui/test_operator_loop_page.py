"""Issue 14, part 5 on the operator page in headless chromium against a real stack: per-pair
live counters from two instances (observed vs predicted latency, budget attainment, error and
retry rates, cost and cost saved per family and fleet-wide), latency drift and the refit
history, and live agreement against what the profiles imply."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from contracts.latency_feedback import (
    AgreementCell,
    LatencyFeedback,
    MixCell,
    PairLoadFeedback,
    RatioHistogram,
    ratio_bucket,
)
from contracts.live_state import PairCounters
from contracts.routing_table import RoutingTable
from control_plane.loop.drift import Correction
from control_plane.loop.refit import apply_refit
from control_plane.settings import PublisherOptions
from control_plane.store.publisher import Publisher
from tests.ui.browser import Browser
from tests.ui.conftest import SCREENSHOT_DIR
from tests.ui.stack import ADMIN, Stack, client, write_state

pytestmark = pytest.mark.integration
FP8 = "llama-3.1-8b-instruct@fp8"
INT4 = "llama-3.1-8b-instruct@awq-int4"
BIG = "llama-3.1-70b-instruct@fp8"


def _counters(requests: int, met: int, missed: int, errors: int, retries: int) -> PairCounters:
    return PairCounters(
        family="llama-3.1-8b-instruct",
        requests=requests,
        budget_met=met,
        budget_missed=missed,
        errors=errors,
        retries=retries,
        cost_usd=0.01 * requests,
        baseline_cost_usd=0.03 * requests,
        fleet_baseline_cost_usd=0.05 * requests,
        latency_n=requests,
        latency_sum_s=0.9 * requests,
        predicted_sum_s=0.6 * requests,
        ratio_counts={ratio_bucket(1.5): requests},
    )


async def _two_instances(stack: Stack) -> None:
    """ui-dp-b and ui-dp-c served INT4 (30 + 10 answers) and BIG (10, no saving)."""
    big = PairCounters(
        family="llama-3.1-70b-instruct",
        requests=10,
        cost_usd=0.2,
        baseline_cost_usd=0.2,
        fleet_baseline_cost_usd=0.2,
    )
    for instance, pairs in (
        ("ui-dp-b", {INT4: _counters(30, 25, 5, 3, 2), BIG: big}),
        ("ui-dp-c", {INT4: _counters(10, 10, 0, 1, 2)}),
    ):
        await write_state(stack.redis, stack.keys, instance, {}, {}, stack.version, pairs=pairs)


async def _refit_and_feedback(stack: Stack) -> int:
    """Publish a refit of FP8 (as the refit loop would), then the data planes' feedback about
    it: FP8 observed 3x its prediction, INT4 agreeing with its reference on 20% of math."""
    raw = await stack.redis.get(stack.keys.table_version(stack.version))
    assert raw is not None
    table = RoutingTable.model_validate_json(raw)
    now = datetime.now(UTC)
    fix = Correction(pair=FP8, samples=250, e2e_ratio=2.0, ttft_factor=1.8, tpot_factor=1.6)
    refit = apply_refit(table, [fix], 600.0, now)
    published = await Publisher(stack.redis, stack.keys, PublisherOptions()).publish(refit)
    assert published.version is not None
    report = LatencyFeedback(
        instance="ui-dp-b",
        table_version=published.version,
        window_start=now - timedelta(seconds=60),
        window_end=now,
        cells=(
            PairLoadFeedback(
                pair=FP8, load_bucket=0, e2e=RatioHistogram(counts={ratio_bucket(3.0): 250})
            ),
        ),
        agreement=(AgreementCell(pair=INT4, category="math", checks=200, agreed=40),),
    )
    await stack.redis.xadd(stack.keys.feedback, {"report": report.model_dump_json()})
    return published.version


async def _get(stack: Stack, path: str) -> Any:
    async with client(ADMIN) as session, session.get(f"{stack.cp_url}{path}") as resp:
        assert resp.status == 200, await resp.text()
        return await resp.json()


async def _text(browser: Browser, selector: str) -> str:
    found: str = await browser.evaluate(
        f"document.querySelector({json.dumps(selector)})?.textContent ?? null"
    )
    return found


async def test_live_api_merges_the_counters_of_the_instances(stack: Stack) -> None:
    await _two_instances(stack)
    live = await _get(stack, "/ui/api/live")
    int4 = next(p for p in live["pairs"] if p["pair"] == INT4)
    assert (int4["requests"], int4["budget_met"], int4["budget_missed"]) == (40, 35, 5)
    assert int4["budget_attainment"] == pytest.approx(35 / 40)
    assert int4["error_rate"] == pytest.approx(4 / 44)
    assert int4["retry_rate"] == pytest.approx(4 / 40)
    assert int4["cost_saved_usd"] == pytest.approx(0.8)
    assert int4["observed_mean_s"] == pytest.approx(0.9)
    assert int4["predicted_mean_s"] == pytest.approx(0.6)
    assert live["fleet_cost"]["requests"] == 50
    assert live["fleet_cost"]["cost_saved_usd"] == pytest.approx(0.8)
    assert live["family_cost"]["llama-3.1-70b-instruct"]["cost_saved_usd"] == pytest.approx(0)


async def test_loop_api_shows_drift_refits_and_agreement(stack: Stack) -> None:
    version = await _refit_and_feedback(stack)
    loop = await _get(stack, "/ui/api/loop")
    assert loop["table_version"] == version
    assert loop["reports"] == 1
    (drift,) = loop["drift"]
    assert (drift["pair"], drift["samples"], drift["drifting"]) == (FP8, 250, True)
    assert drift["e2e_ratio"] == pytest.approx(3.0, rel=0.05)
    (refit,) = loop["refits"]
    assert (refit["version"], refit["base_version"]) == (version, stack.version)
    assert refit["note"].startswith("refit from live traffic")
    assert refit["factors"] == {FP8: [1.8, 1.6]}
    (agreement,) = loop["agreement"]
    assert (agreement["pair"], agreement["category"], agreement["checks"]) == (INT4, "math", 200)
    assert agreement["agreement"] == pytest.approx(0.2)
    assert agreement["lower"] < agreement["agreement"] < agreement["upper"] < agreement["expected"]
    assert agreement["drifting"] is True


async def test_page_shows_per_pair_counters_cost_and_the_closed_loop(
    stack: Stack, browser: Browser
) -> None:
    await _two_instances(stack)
    version = await _refit_and_feedback(stack)
    _, _, best = await _mix_feedback(stack)
    await browser.navigate(f"{stack.cp_url}/ui")
    await browser.wait_for("document.body.dataset.ready === 'true'")
    row = f'#live-pairs tr[data-pair="{INT4}"]'
    await browser.wait_for(
        f"document.querySelector({json.dumps(row)} + ' .requests')?.textContent === '40'"
    )
    assert await _text(browser, f"{row} .observed") == "900 ms"
    assert await _text(browser, f"{row} .predicted") == "600 ms"
    assert await _text(browser, f"{row} .ratio") == "1.48\u00d7 \u00b7 1.48\u00d7"  # 1.5's bucket
    assert await _text(browser, f"{row} .attainment") == "87.5%"
    assert await _text(browser, f"{row} .errors") == "9.1%"
    assert await _text(browser, f"{row} .retries") == "10.0%"
    assert await _text(browser, f"{row} .cost") == "$0.400"
    assert await _text(browser, f"{row} .saved") == "$0.800"
    assert await _text(browser, f"{row} .fleet-saved") == "$1.600"
    assert await _text(browser, '#live-cost tr[data-scope="fleet"] .saved') == "$0.800"
    family = '#live-cost tr[data-scope="llama-3.1-70b-instruct"] .saved'
    assert await _text(browser, family) == "$0"
    # The closed loop: FP8 drifting at 3x, the refit in the history, INT4's agreement low.
    drift = f'#loop-drift tr[data-pair="{FP8}"]'
    assert (await _text(browser, f"{drift} .e2e")).startswith(("2.9", "3.0", "3.1"))
    assert await _text(browser, f"{drift} .drift") == "drifting"
    refit = f'#loop-refits tr[data-version="{version}"] .note'
    assert (await _text(browser, refit)).startswith("refit from live traffic")
    agreement = f'#loop-agreement tr[data-pair="{INT4}"]'
    assert await _text(browser, f"{agreement} .live") == "0.200"
    lower, upper = (await _text(browser, f"{agreement} .bounds")).split(" … ")
    assert 0.0 < float(lower) < 0.2 < float(upper) < 1.0
    assert await _text(browser, f"{agreement} .drift") == "drifting"
    demotions = await _text(browser, "#loop-demotions tbody")
    assert demotions == "no accuracy demotion in force"  # demotion is off in this policy
    # Evidence: half the mix is provable; the best chat pair would prove the other half.
    summary = await _text(browser, "#evidence-summary")
    assert summary.startswith("Provable share 50.0% of 20 request(s)"), summary
    evidence = f'#evidence-rows tr[data-pair="{best}"][data-category="chat"]'
    assert await _text(browser, f"{evidence} .share") == "50.0%"
    await browser.evaluate("document.getElementById('pairs-live-section').scrollIntoView()")
    png = await browser.screenshot(SCREENSHOT_DIR / "operator-closed-loop.png")
    assert len(png) > 20_000
    assert browser.log.errors == []


async def _mix_feedback(stack: Stack) -> tuple[float, float, str]:
    """Feedback whose mix has 10 chat requests at a floor the best chat bound proves (served
    under the guarantee by the best pair) and 10 at a floor a point above it (best effort)."""
    raw = await stack.redis.get(stack.keys.table_version(stack.version))
    assert raw is not None
    table = RoutingTable.model_validate_json(raw)
    best = max(table.entries, key=lambda e: e.accuracy_bound["chat"])
    proven = math.floor(best.accuracy_bound["chat"] * 100) / 100
    above = proven + 0.01
    now = datetime.now(UTC)
    cells = tuple(
        MixCell(
            category="chat",
            floor=floor,
            pair=best.pair,
            requests=10,
            proven=done,
            input_tokens=5000,
            output_tokens=2000,
            cost_usd=best.cost_usd(5000, 2000),
        )
        for floor, done in ((proven, 10), (above, 0))
    )
    report = LatencyFeedback(
        instance="ui-dp-b",
        table_version=stack.version,
        window_start=now - timedelta(seconds=600),
        window_end=now,
        mix=cells,
    )
    await stack.redis.xadd(stack.keys.feedback, {"report": report.model_dump_json()})
    return proven, above, best.pair


async def test_evidence_api_reports_the_provable_share_and_what_would_move_it(
    stack: Stack,
) -> None:
    proven, above, best = await _mix_feedback(stack)
    found = await _get(stack, "/v1/evidence")
    assert (found["table_version"], found["requests"]) == (stack.version, 20)
    assert found["provable_share"] == pytest.approx(0.5)  # `above` is above every bound
    assert found["proven_share"] == pytest.approx(0.5)
    assert found["window_s"] == pytest.approx(600, abs=5)
    assert [c["floor"] for c in found["mix"]] == [proven, above]
    # The best pair leaves `above` undecided (its upper bound is several points higher):
    # deciding it would prove the 10 best-effort requests, at no saving (they are its own).
    row = next(r for r in found["rows"] if r["pair"] == best and r["category"] == "chat")
    assert above in row["floors"]
    assert (row["requests_moved"], row["usd_per_day"]) == (10, pytest.approx(0.0))
    assert row["items_needed"] is None or row["items_needed"] > 0
    loop = await _get(stack, "/ui/api/loop")
    assert loop["evidence"]["provable_share"] == found["provable_share"]
    assert loop["evidence"]["rows"] == found["rows"]
