"""A real browser for the card's tests: headless Chromium (Debian's `chromium`; `.ci/run` installs it) driven
over the DevTools protocol on a pipe (--remote-debugging-pipe: JSON messages ended by a NUL byte), so the tests
read the page as rendered (the DOM after layout, images decoded, a screenshot) and need no package beyond the
browser. Every wait has a deadline."""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path

import pytest

BROWSER_DEADLINE_S = 60
CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


class Page:
    def __init__(self, browser: Browser, session: str):
        self._browser, self._session = browser, session

    def evaluate(self, expression: str):
        """The value of a JavaScript expression in the page (JSON-serialisable), as the page is rendered now."""
        reply = self._browser.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                        "awaitPromise": True}, self._session)
        result = reply["result"]
        assert "exceptionDetails" not in reply, reply["exceptionDetails"]
        return result.get("value")

    def screenshot(self) -> bytes:
        """A PNG of the whole page as rendered."""
        height = self.evaluate("document.documentElement.scrollHeight")
        self._browser.call("Emulation.setDeviceMetricsOverride",
                           {"width": 1280, "height": min(int(height), 12000), "deviceScaleFactor": 1,
                            "mobile": False}, self._session)
        data = self._browser.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True},
                                  self._session)["data"]
        return base64.b64decode(data)


class Browser:
    """One headless Chromium; `open(path)` loads a file in a new tab and waits until it has loaded."""

    def __init__(self, executable: str):
        to_browser, self._write = os.pipe()
        self._read, from_browser = os.pipe()

        def pipes() -> None:
            os.dup2(to_browser, 3)
            os.dup2(from_browser, 4)

        self._process = subprocess.Popen(
            [executable, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--mute-audio",
             "--remote-debugging-pipe", "--window-size=1280,900", "about:blank"],
            pass_fds=(3, 4), preexec_fn=pipes, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_browser)
        os.close(from_browser)
        self._buffer, self._next_id = b"", 0
        self.dialogs: list[str] = []

    def call(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._write, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + BROWSER_DEADLINE_S
        while True:
            reply = self._message(deadline, method)
            if reply.get("method") == "Page.javascriptDialogOpening":
                self.dialogs.append(reply["params"].get("message", ""))
            if reply.get("id") == self._next_id:
                assert "error" not in reply, f"{method}: {reply['error']}"
                return reply.get("result", {})

    def _message(self, deadline: float, waiting_for: str) -> dict:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self._read], [], [], max(0.0, left))
            if not ready:
                raise TimeoutError(f"Chromium did not answer {waiting_for} within {BROWSER_DEADLINE_S} s")
            chunk = os.read(self._read, 1 << 20)
            if not chunk:
                raise RuntimeError(f"Chromium exited while answering {waiting_for}")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def open(self, path: Path) -> Page:
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.call("Page.enable", {}, session)
        self.call("Page.navigate", {"url": Path(path).resolve().as_uri()}, session)
        page = Page(self, session)
        deadline = time.monotonic() + BROWSER_DEADLINE_S
        while page.evaluate("document.readyState + ':' + [...document.images].every(i => i.complete)") \
                != "complete:true":
            assert time.monotonic() < deadline, f"{path} did not finish loading within {BROWSER_DEADLINE_S} s"
            time.sleep(0.05)
        return page

    def close(self) -> None:
        self._process.kill()
        self._process.wait(timeout=BROWSER_DEADLINE_S)
        os.close(self._write)
        os.close(self._read)


def chromium_path() -> str | None:
    given = os.environ.get("SHARDSMITH_CHROMIUM")
    if given:
        return given
    return next((found for name in CANDIDATES if (found := shutil.which(name))), None)


@pytest.fixture(scope="session")
def browser():
    executable = chromium_path()
    if executable is None:
        pytest.skip("no Chromium on this machine (Debian: apt-get install chromium; .ci/run installs it), so the "
                    "card's browser tests cannot run here")
    opened = Browser(executable)
    yield opened
    opened.close()
