"""resilience/overshoot.py: per pair, how much later than predicted answers arrive (a high
quantile of observed - predicted, bounded), no client setting it alone."""

from __future__ import annotations

import pytest

from data_plane.resilience.overshoot import MIN_SAMPLES, SAMPLES, Overshoot

ANY = (None, 0.1)  # an unknown client: not capped


def margin(found: Overshoot, pair: str = "p") -> float | None:
    raw = found.raw().get(pair)
    return None if raw is None else raw[0]


def test_the_margin_is_a_high_quantile_of_the_lateness_once_there_are_samples() -> None:
    found = Overshoot(lambda: 5.0)
    for _ in range(MIN_SAMPLES - 1):
        found.answered("p", 0.31, 0.3, ANY)
    assert margin(found) is None  # too few to take a quantile
    for _ in range(50):
        found.answered("p", 0.31, 0.3, ANY)  # 10 ms late
    for _ in range(3):
        found.answered("p", 0.5, 0.3, ANY)  # a few far later: above the 90th percentile
    assert margin(found) == pytest.approx(0.01)
    assert found.raw()["p"][1] == 5.0
    for _ in range(SAMPLES):  # only the last SAMPLES count
        found.answered("p", 0.33, 0.3, ANY)
    assert margin(found) == pytest.approx(0.03)


def test_a_sample_is_bounded_by_its_prediction_and_early_answers_count_nothing() -> None:
    found = Overshoot(lambda: 0.0)
    for _ in range(SAMPLES):
        found.answered("stalled", 60.0, 0.3, ANY)
        found.answered("early", 0.1, 0.3, ANY)
        found.answered("ignored", 0.1, 0.0, ANY)  # no prediction: nothing to compare
    assert margin(found, "stalled") == pytest.approx(0.3)
    assert margin(found, "early") == 0.0
    assert margin(found, "ignored") is None


def test_one_slow_client_cannot_set_the_margin_for_everyone() -> None:
    """Half the answers are one client's, each 200 ms late (its own network, say); twenty
    other clients' answers are 5 ms late. The slow client gives at most its 10% share of the
    samples, which stays above the 90th percentile: the margin is the others' 5 ms."""
    found = Overshoot(lambda: 0.0)
    for i in range(400):
        found.answered("p", 0.5, 0.3, ("slow", 0.1))
        found.answered("p", 0.305, 0.3, (f"c{i % 20}", 0.1))
    assert margin(found) == pytest.approx(0.005)
    assert found.capped > 300
    uncapped = Overshoot(lambda: 0.0)
    for _ in range(400):  # the same answers from clients nothing tells apart
        uncapped.answered("p", 0.5, 0.3, ANY)
        uncapped.answered("p", 0.305, 0.3, ANY)
    assert margin(uncapped) == pytest.approx(0.2)


def test_few_clients_share_the_samples_equally() -> None:
    """Two tenants, one sending four times the other's answers: a 10% cap each would leave
    three samples, no margin; each may give half, so the margin is taken, and the busier
    one's lateness counts for half of the samples, not four fifths."""
    found = Overshoot(lambda: 0.0)
    for _ in range(100):
        found.answered("p", 0.31, 0.3, ("steady", 0.1))
        for _ in range(4):
            found.answered("p", 0.32, 0.3, ("bursty", 0.1))
    assert margin(found) == pytest.approx(0.02)
    assert found.capped > 200  # the busier one's samples past its half
    alone = Overshoot(lambda: 0.0)
    for _ in range(MIN_SAMPLES):
        alone.answered("p", 0.31, 0.3, ("steady", 0.1))  # a client alone gives every sample
    assert margin(alone) == pytest.approx(0.01)


def test_the_margin_is_the_quantile_of_exactly_the_last_samples_kept() -> None:
    """The window is kept in order as samples come and go (not sorted per answer): after
    every answer, the margin is the quantile of the last SAMPLES bounded samples taken,
    repeated values and capped clients included."""
    import random

    from data_plane.resilience.overshoot import QUANTILE

    rng = random.Random(7)
    found = Overshoot(lambda: 0.0)
    taken: list[float] = []
    for i in range(5 * SAMPLES):
        late = rng.choice([0.0, 0.01, 0.02, rng.uniform(0.0, 0.4)])
        client = ("a", 0.1) if i % 4 == 0 else ("b", 0.1) if i % 4 == 1 else ANY
        before = found.capped
        found.answered("p", 0.3 + late, 0.3, client)
        if found.capped == before:
            taken.append(min(late, 0.3))
        window = sorted(taken[-SAMPLES:])
        if len(window) >= MIN_SAMPLES:
            assert margin(found) == pytest.approx(window[int(QUANTILE * (len(window) - 1))])
