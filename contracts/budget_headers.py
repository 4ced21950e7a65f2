"""The request headers that carry a budget: the data plane reads them, the control plane's
explainer forwards them (docs/design.md, "Request contract"). Names only; parsing and bounds
are the data plane's (`data_plane/request/budget.py`)."""

from __future__ import annotations

LATENCY_HEADER = "X-Latency-Budget-Ms"
TTFT_HEADER = "X-TTFT-Budget-Ms"
ACCURACY_HEADER = "X-Min-Accuracy"
COST_HEADER = "X-Max-Cost-Usd"
MODE_HEADER = "X-Budget-Mode"
CATEGORY_HEADER = "X-Task-Category"
BUDGET_HEADERS = (
    LATENCY_HEADER,
    TTFT_HEADER,
    ACCURACY_HEADER,
    COST_HEADER,
    MODE_HEADER,
    CATEGORY_HEADER,
)
