"""Debian's chromium, headless, driven over the Chrome DevTools Protocol with aiohttp's websocket
client: navigate, evaluate, click, type and take screenshots. No Playwright, no Selenium.

The browser runs with a fresh profile and every background fetch switched off, so the only
traffic it makes is to the loopback servers a test points it at (tests assert that too).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.support.waiting import eventually

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--disable-extensions",
    "--hide-scrollbars",
    "--mute-audio",
    "--force-device-scale-factor=1",
    "--window-size=1400,1000",
)
COMMAND_TIMEOUT_S = 30.0
START_TIMEOUT_S = 60.0


class BrowserError(AssertionError):
    """The page threw, a command failed, or the browser did not start."""


@dataclass
class PageLog:
    """What the page did: every URL it requested and every error it reported."""

    requested: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class Browser:
    """One chromium process with one page target."""

    def __init__(
        self,
        process: asyncio.subprocess.Process,
        session: aiohttp.ClientSession,
        ws: aiohttp.ClientWebSocketResponse,
    ) -> None:
        self._process = process
        self._session = session
        self._ws = ws
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._loaded = asyncio.Event()
        self.log = PageLog()
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for message in self._ws:
            if message.type is not aiohttp.WSMsgType.TEXT:
                break
            self._dispatch(json.loads(message.data))
        for future in self._pending.values():
            if not future.done():
                future.set_exception(BrowserError("the DevTools connection closed"))

    def _dispatch(self, doc: dict[str, Any]) -> None:
        if "id" in doc:
            future = self._pending.pop(doc["id"], None)
            if future is not None and not future.done():
                future.set_result(doc)
            return
        method, params = doc.get("method"), doc.get("params", {})
        if method == "Network.requestWillBeSent":
            self.log.requested.append(params["request"]["url"])
        elif method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            self.log.errors.append(f"exception: {text}")
        elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
            self.log.errors.append("console.error: " + " ".join(
                str(a.get("value", a.get("description", ""))) for a in params.get("args", [])
            ))  # fmt: skip
        elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
            self.log.errors.append(
                f"log: {params['entry'].get('text')} {params['entry'].get('url', '')}"
            )
        elif method == "Page.loadEventFired":
            self._loaded.set()

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        """One DevTools command; its `result`, or BrowserError with the protocol's error."""
        command_id = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[command_id] = future
        await self._ws.send_str(json.dumps({"id": command_id, "method": method, "params": params}))
        async with asyncio.timeout(COMMAND_TIMEOUT_S):
            reply = await future
        if "error" in reply:
            raise BrowserError(f"{method}: {reply['error']}")
        result: dict[str, Any] = reply.get("result", {})
        return result

    async def navigate(self, url: str) -> None:
        self._loaded.clear()
        reply = await self.send("Page.navigate", url=url)
        if reply.get("errorText"):
            raise BrowserError(f"navigating to {url}: {reply['errorText']}")
        async with asyncio.timeout(COMMAND_TIMEOUT_S):
            await self._loaded.wait()

    async def evaluate(self, expression: str) -> Any:
        """The JSON value of a JavaScript expression (promises are awaited)."""
        reply = await self.send(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in reply:
            details = reply["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            raise BrowserError(f"evaluating {expression!r}: {text}")
        return reply["result"].get("value")

    async def wait_for(self, expression: str, timeout_s: float = 20.0) -> None:
        """Until the expression is truthy in the page."""

        async def holds() -> bool:
            return bool(await self.evaluate(f"Boolean({expression})"))

        await eventually(holds, timeout_s=timeout_s, interval_s=0.05, what=expression)

    async def click(self, selector: str) -> None:
        """A real mouse click (pressed and released) at the middle of the element."""
        box = await self.evaluate(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)});"
            " if (!e) return null; e.scrollIntoView({block: 'center'});"
            " const r = e.getBoundingClientRect();"
            " return {x: r.left + r.width / 2, y: r.top + r.height / 2}; })()"
        )
        if box is None:
            raise BrowserError(f"nothing matches {selector!r}")
        for kind in ("mousePressed", "mouseReleased"):
            await self.send(
                "Input.dispatchMouseEvent",
                type=kind,
                x=box["x"],
                y=box["y"],
                button="left",
                clickCount=1,
            )

    async def type_into(self, selector: str, text: str) -> None:
        """Replace an input's text as a person would: focus, select all, type."""
        found = await self.evaluate(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)});"
            " if (!e) return false; e.focus(); e.select(); return true; })()"
        )
        if not found:
            raise BrowserError(f"nothing matches {selector!r}")
        await self.send("Input.insertText", text=text)

    async def screenshot(self, path: Path) -> bytes:
        """A PNG of the whole page (not only the window), written to `path`."""
        height = await self.evaluate("document.documentElement.scrollHeight")
        await self.send(
            "Emulation.setDeviceMetricsOverride",
            width=1400,
            height=int(height),
            deviceScaleFactor=1,
            mobile=False,
        )
        reply = await self.send("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        await self.send("Emulation.clearDeviceMetricsOverride")
        png = base64.b64decode(reply["data"])
        await asyncio.to_thread(_write, path, png)
        return png

    async def close(self) -> None:
        await self._ws.close()
        await self._session.close()
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader
        if self._process.returncode is None:
            self._process.terminate()
            try:
                async with asyncio.timeout(10):
                    await self._process.wait()
            except TimeoutError:
                self._process.kill()
                await self._process.wait()


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def chromium_binary() -> str:
    binary = shutil.which("chromium")
    if binary is None:
        pytest.fail(
            "chromium is not installed: `bash infra/scripts/ensure-system-deps.sh chromium` "
            "(Debian's chromium package)"
        )
    return binary


async def _debugging_port(profile: Path, process: asyncio.subprocess.Process) -> int:
    """Chromium writes the port it picked into DevToolsActivePort once it listens."""
    port_file = profile / "DevToolsActivePort"

    def ready() -> bool:
        if process.returncode is not None:
            raise BrowserError(f"chromium exited with {process.returncode}")
        return port_file.exists() and len(port_file.read_text().splitlines()) >= 2

    await eventually(ready, timeout_s=START_TIMEOUT_S, interval_s=0.05, what="chromium start")
    return int(port_file.read_text().splitlines()[0])


async def _page_socket(session: aiohttp.ClientSession, port: int) -> str:
    async with session.get(f"http://127.0.0.1:{port}/json/list") as resp:
        targets = await resp.json()
    pages = [t for t in targets if t.get("type") == "page"]
    if not pages:
        raise BrowserError(f"chromium has no page target: {targets}")
    url: str = pages[0]["webSocketDebuggerUrl"]
    return url


@contextlib.asynccontextmanager
async def launch_browser(workdir: Path) -> AsyncIterator[Browser]:
    """A fresh headless chromium (own profile under `workdir`), closed on exit."""
    profile = workdir / "chromium-profile"
    profile.mkdir(parents=True)
    with (workdir / "chromium.log").open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            chromium_binary(),
            *CHROMIUM_FLAGS,
            f"--user-data-dir={profile}",
            "--remote-debugging-port=0",
            "about:blank",
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )
    session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=COMMAND_TIMEOUT_S))
    try:
        port = await _debugging_port(profile, process)
        ws = await session.ws_connect(await _page_socket(session, port), max_msg_size=0)
    except BaseException:
        await session.close()
        process.kill()
        await process.wait()
        raise
    browser = Browser(process, session, ws)
    try:
        for domain in ("Page", "Runtime", "Network", "Log"):
            await browser.send(f"{domain}.enable")
        yield browser
    finally:
        await browser.close()
