"""resilience/output_length.py: how long a tenant's answers run, per family and category, as
flow control predicts its requests' service time (docs/data_plane.md, "Flow control")."""

from __future__ import annotations

from data_plane.resilience.output_length import MIN_SAMPLES, SAMPLES, OutputLengths

LONG = ("long", "fam", "chat")
TINY = ("tiny", "fam", "chat")


def test_no_figure_before_enough_answers_then_the_ninetieth_percentile() -> None:
    lengths = OutputLengths()
    for n in range(1, MIN_SAMPLES):
        lengths.answered(LONG, (n, 1000))
    assert lengths.of("long") == {}
    lengths.answered(LONG, (MIN_SAMPLES, 1000))  # 1..16: index int(0.9 x 15) = 13
    assert lengths.of("long") == {("fam", "chat"): 14}
    for _ in range(SAMPLES):
        lengths.answered(LONG, (300, None))  # no max_tokens: never cut
    assert lengths.of("long") == {("fam", "chat"): 300}


def test_an_answer_cut_at_its_max_tokens_counts_as_longer_than_any_figure() -> None:
    """14 of 16 answers stop at 20 tokens: 20. A third one cut at its cap: more than 10% are
    cut, the figure is unknown and requests are predicted at their max_tokens again."""
    lengths = OutputLengths()
    for _ in range(14):
        lengths.answered(LONG, (20, 1000))
    lengths.answered(LONG, (1000, 1000))
    lengths.answered(LONG, (1000, 1000))
    assert lengths.of("long") == {("fam", "chat"): 20}
    lengths.answered(LONG, (1000, 1000))
    assert lengths.of("long") == {}


def test_a_tenant_asking_one_token_at_a_time_learns_no_short_figure() -> None:
    lengths = OutputLengths()
    for _ in range(SAMPLES):
        lengths.answered(TINY, (1, 1))  # max_tokens 1: every answer is cut
    assert lengths.of("tiny") == {}


def test_one_tenants_one_token_answers_do_not_make_another_tenants_long_answers_cheap() -> None:
    """A tenant sends 1,000 answers of 1 token (with room for 1,000), before and after another
    tenant's 16 answers of 800: the other tenant's requests are predicted at 800, the short
    tenant's at 1, and a tenant with no answers yet at its max_tokens (no figure)."""
    lengths = OutputLengths()
    for _ in range(500):
        lengths.answered(TINY, (1, 1000))
    for _ in range(MIN_SAMPLES):
        lengths.answered(LONG, (800, 1000))
    for _ in range(500):
        lengths.answered(TINY, (1, 1000))
    assert lengths.of("long") == {("fam", "chat"): 800}
    assert lengths.of("tiny") == {("fam", "chat"): 1}
    assert lengths.of("fresh") == {}


def test_figures_are_per_family_and_category() -> None:
    lengths = OutputLengths()
    for _ in range(MIN_SAMPLES):
        lengths.answered(("t", "fam", "chat"), (40, None))
        lengths.answered(("t", "fam", "code"), (400, None))
        lengths.answered(("t", "other", "chat"), (4, None))
    assert lengths.of("t") == {("fam", "chat"): 40, ("fam", "code"): 400, ("other", "chat"): 4}


def test_the_kinds_kept_are_bounded_and_the_least_recently_answered_goes() -> None:
    """Past the bound, a kind evicted loses its figure: its tenant's requests are predicted
    at their max_tokens again, never shorter."""
    lengths = OutputLengths(max_kinds=2)
    for tenant in ("a", "b"):
        for _ in range(MIN_SAMPLES):
            lengths.answered((tenant, "fam", "chat"), (10, None))
    lengths.answered(("a", "fam", "chat"), (10, None))  # a answered last
    lengths.answered(("c", "fam", "chat"), (10, None))
    assert lengths.of("a") == {("fam", "chat"): 10}
    assert lengths.of("b") == {}


def test_every_figure_is_listed_for_the_gauge_and_a_lost_one_leaves() -> None:
    lengths = OutputLengths()
    for _ in range(MIN_SAMPLES):
        lengths.answered(LONG, (300, 1000))
        lengths.answered(TINY, (2, 1000))
    assert sorted(lengths.figures()) == [("long", "fam", "chat", 300), ("tiny", "fam", "chat", 2)]
    for _ in range(SAMPLES):
        lengths.answered(TINY, (1000, 1000))  # every answer cut: no figure
    assert list(lengths.figures()) == [("long", "fam", "chat", 300)]
