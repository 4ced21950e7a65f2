"""The fleet the admission tests decide on: the bench's (section 9) two pairs of one family,
int4 and fp16 at four times the price, whose prediction for a 15-token answer at load L
(this request included) is 0.03 + 15 x (0.008 + 0.002 L) = 0.15 + 0.03 L seconds: a 400 ms
budget is met up to L = 8 (0.39 s): the fleet sustains 16 in flight; the standard class (75%)
may fill 6 a pair, batch (50%) 4."""

from __future__ import annotations

from contracts.policy import PriorityClass
from data_plane.decision.compile import compile_table
from data_plane.decision.saturation import Fleet, Seen, fleet_of
from data_plane.domain import Budget, CompiledTable, HealthView, RequestFacts, RouteRequest
from tests.unit.data_plane.tables import entry, table

INT4, FP16 = "fam@int4#0", "fam@fp16#0"
FACTS = RequestFacts("auto", "chat", 0.2, 8, 15)
BUDGET = Budget(latency_s=0.4)
STANDARD = ("standard", PriorityClass(share=0.75, sheddable=True))
BATCH = ("batch", PriorityClass(share=0.5, sheddable=True))
CRITICAL = ("critical", PriorityClass(share=1.0, sheddable=False))


def pair(quant: str, usd: float, rank: int) -> dict[str, object]:
    return entry(
        "fam", quant, input_usd_per_mtok=usd, output_usd_per_mtok=2 * usd,
        ttft_base_s=0.03, ttft_per_input_token_s=0.0, ttft_per_load_s=0.0,
        tpot_base_s=0.008, tpot_per_load_s=0.002, accuracy=0.9, precision_rank=rank,
    )  # fmt: skip


def bench_fleet() -> CompiledTable:
    return compile_table(table([pair("int4", 1.0, 1), pair("fp16", 4.0, 0)]))


def request(budget: Budget = BUDGET) -> RouteRequest:
    return RouteRequest(FACTS, budget)


def seen(
    tenants: dict[str, dict[str, int]] | None = None,
    refused: dict[str, dict[str, float]] | None = None,
    now: float = 0.0,
) -> Seen:
    """This replica's requests in flight per pair and tenant, and its recent refusals."""
    return Seen(tenants if tenants is not None else {}, now, None, refused or {})


def fleet(
    load: dict[str, float],
    tenants: dict[str, dict[str, int]] | None = None,
    budget: Budget = BUDGET,
    share: float = 0.75,
) -> Fleet | None:
    """The fleet at `load` (per endpoint) for a class of `share`; `tenants` default: all of
    it this replica's, "a"."""
    if tenants is None:
        tenants = {e.split("#")[0]: {"a": int(n)} for e, n in load.items() if n}
    health = HealthView(load=load)
    return fleet_of(bench_fleet(), request(budget), health, seen(tenants), share)
