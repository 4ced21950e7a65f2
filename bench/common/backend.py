"""The fast fake engine: nginx answering every POST with a fixed chat completion or SSE body.

nginx is never the bottleneck (a static `return` costs microseconds), so whatever a proxy in
front of it adds is the proxy's own cost. One nginx serves `n_ports` JSON ports and as many SSE
ports, so a routing table can point a dozen pairs at it.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.common.machine import Cores, pinned
from bench.common.processes import free_port, running

CHAT_COMPLETION: dict[str, object] = {
    "id": "chatcmpl-bench",
    "object": "chat.completion",
    "created": 1767225600,
    "model": "bench-model",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "The answer is 42. " * 8},
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 120, "completion_tokens": 48, "total_tokens": 168},
}


def _sse_body(n_chunks: int = 16) -> str:
    events = []
    for i in range(n_chunks):
        delta = {"role": "assistant", "content": ""} if i == 0 else {"content": "tok "}
        chunk = {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 1767225600,
            "model": "bench-model",
            "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
        }
        events.append("data: " + json.dumps(chunk, separators=(",", ":")) + "\n\n")
    final = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 1767225600,
        "model": "bench-model",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 120, "completion_tokens": 15, "total_tokens": 135},
    }
    events.append("data: " + json.dumps(final, separators=(",", ":")) + "\n\n")
    events.append("data: [DONE]\n\n")
    return "".join(events)


CHAT_BODY = json.dumps(CHAT_COMPLETION, separators=(",", ":"))
SSE_BODY = _sse_body()
MODELS_BODY = json.dumps({"object": "list", "data": [{"id": "bench-model", "object": "model"}]})


@dataclass(frozen=True, slots=True)
class Backend:
    json_ports: tuple[int, ...]
    sse_ports: tuple[int, ...]

    def url(self, i: int = 0, *, stream: bool = False) -> str:
        ports = self.sse_ports if stream else self.json_ports
        return f"http://127.0.0.1:{ports[i % len(ports)]}"


def _quote(body: str) -> str:
    # nginx single-quoted strings: only ' and \ need escaping; `$` would start a variable.
    if "$" in body:
        raise ValueError("nginx bodies must not contain '$'")
    return "'" + body.replace("\\", "\\\\").replace("'", "\\'") + "'"


def nginx_conf(workdir: Path, json_ports: tuple[int, ...], sse_ports: tuple[int, ...]) -> str:
    """One worker, no logs, unlimited keep-alive: a responder that costs next to nothing."""

    def listen(ports: tuple[int, ...]) -> str:
        return "".join(f"    listen 127.0.0.1:{p} backlog=4096;\n" for p in ports)

    def server(ports: tuple[int, ...], ctype: str, body: str) -> str:
        return (
            "  server {\n" + listen(ports) + "    location = /v1/models {\n"
            "      default_type application/json;\n"
            f"      return 200 {_quote(MODELS_BODY)};\n    }}\n"
            "    location / {\n"
            f"      default_type {ctype};\n"
            f"      return 200 {_quote(body)};\n    }}\n  }}\n"
        )

    temp = "".join(
        f"  {name}_temp_path {workdir / name};\n"
        for name in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    return (
        "worker_processes 1;\ndaemon off;\n"
        f"pid {workdir / 'nginx.pid'};\nerror_log {workdir / 'error.log'} warn;\n"
        "events { worker_connections 8192; multi_accept on; }\n"
        "http {\n  access_log off;\n  keepalive_requests 10000000;\n  keepalive_timeout 300s;\n"
        "  client_body_buffer_size 1m;\n  client_max_body_size 8m;\n"
        + temp
        + server(json_ports, "application/json", CHAT_BODY)
        + server(sse_ports, "text/event-stream", SSE_BODY)
        + "}\n"
    )


def _distinct_free_ports(n: int) -> list[int]:
    """`n` different free ports (the kernel may hand a just-released port out again, and
    nginx refuses to listen twice on one)."""
    ports: list[int] = []
    while len(ports) < n:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


@contextlib.contextmanager
def run_nginx(workdir: Path, n_ports: int, cpus: Cores) -> Iterator[Backend]:
    """nginx pinned to `cpus`, listening on `n_ports` JSON and `n_ports` SSE loopback ports."""
    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(binary).exists():
        raise RuntimeError("nginx is not installed (Debian package nginx-light; `make bench`)")
    workdir.mkdir(parents=True, exist_ok=True)
    ports = _distinct_free_ports(2 * n_ports)
    backend = Backend(tuple(ports[:n_ports]), tuple(ports[n_ports:]))
    conf = workdir / "nginx.conf"
    conf.write_text(nginx_conf(workdir, backend.json_ports, backend.sse_ports))
    args = pinned([binary, "-c", str(conf), "-p", str(workdir), "-e", "stderr"], cpus)
    with running(args, workdir / "nginx.log", port=backend.sse_ports[-1], timeout_s=15):
        yield backend


def load_balancer_conf(workdir: Path, port: int, servers: Sequence[tuple[int, int]]) -> str:
    """nginx as a round-robin load balancer on `port` in front of loopback `servers`
    ((port, weight), ...), keep-alive upstream connections, no retries of its own."""
    upstream = "".join(f"    server 127.0.0.1:{p} weight={w};\n" for p, w in servers)
    temp = "".join(
        f"  {name}_temp_path {workdir / name};\n"
        for name in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    return (
        "worker_processes 1;\ndaemon off;\n"
        f"pid {workdir / 'nginx.pid'};\nerror_log {workdir / 'error.log'} warn;\n"
        "events { worker_connections 4096; }\n"
        "http {\n  access_log off;\n"
        + temp
        + "  upstream replicas {\n"
        + upstream
        + "    keepalive 64;\n  }\n"
        f"  server {{\n    listen 127.0.0.1:{port};\n    location / {{\n"
        "      proxy_pass http://replicas;\n      proxy_http_version 1.1;\n"
        '      proxy_set_header Connection "";\n      proxy_next_upstream off;\n'
        "      proxy_buffering off;\n    }\n  }\n}\n"
    )
