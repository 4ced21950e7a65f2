"""Posting encoded spans to an OTLP/HTTP collector: the transport half of the OTLP exporter.

What the OpenTelemetry exporter's OTEL_EXPORTER_OTLP_* settings configure, taken from
settings (docs/data_plane.md, "Observability"): the URL, extra headers, a timeout per export and
gzip compression. Like the SDK exporter it retries a batch the collector could not take for
now (429, 502, 503, 504, or no connection) with a growing pause, within the timeout, and
gives up on other answers. Blocking (urllib): the pipeline calls it from a worker thread.
Proxy variables of the environment are not used: spans go straight to the collector.
"""

from __future__ import annotations

import gzip
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field

logger = logging.getLogger(__name__)

RETRYABLE = frozenset({429, 502, 503, 504})
FIRST_PAUSE_S = 0.5


@dataclass(frozen=True, slots=True)
class OtlpTarget:
    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = 10.0
    gzip: bool = False


class OtlpSender:
    """POSTs ExportTraceServiceRequest bytes to one collector."""

    def __init__(self, target: OtlpTarget) -> None:
        self.target = target
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        headers = {**target.headers, "Content-Type": "application/x-protobuf"}
        if target.gzip:
            headers["Content-Encoding"] = "gzip"
        self._headers = headers
        self._closed = False

    def send(self, data: bytes) -> bool:
        """True when the collector took the batch; False (logged) when it did not."""
        if self._closed:
            return False
        body = gzip.compress(data) if self.target.gzip else data
        deadline = time.monotonic() + self.target.timeout_s
        pause = FIRST_PAUSE_S
        while True:
            left = deadline - time.monotonic()
            outcome = self._post(body, max(left, 0.001))
            if outcome is None:
                return True
            if not outcome[0] or time.monotonic() + pause >= deadline:
                logger.warning("span export failed: %s", outcome[1])
                return False
            time.sleep(pause)
            pause *= 2

    def _post(self, body: bytes, timeout_s: float) -> tuple[bool, str] | None:
        """None when accepted, else (worth retrying, why)."""
        request = urllib.request.Request(
            self.target.url, data=body, headers=self._headers, method="POST"
        )
        try:
            with self._opener.open(request, timeout=timeout_s) as resp:
                resp.read()
        except urllib.error.HTTPError as err:
            err.close()
            return err.code in RETRYABLE, f"collector answered {err.code}"
        except (OSError, ValueError) as err:  # refused, reset, timed out, bad URL
            return not isinstance(err, ValueError), type(err).__name__
        return None

    def close(self) -> None:
        self._closed = True
