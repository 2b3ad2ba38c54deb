"""Headless Chromium for the picture tests (Debian's ``chromium`` and ``chromium-driver``),
driven with selenium, and ``afc serve`` in a child process.

Without the browser the tests that need it skip, with one line saying how to get it; CI's
``.ci/run`` installs the two packages when they are missing, so CI always runs them.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

SKIP = (
    "no headless Chromium: install Debian's chromium and chromium-driver "
    "(apt-get install -y chromium chromium-driver; .ci/run does) to run the browser tests"
)


def _binaries() -> tuple[str, str] | None:
    browser = os.environ.get("AFC_TEST_CHROMIUM") or shutil.which("chromium")
    driver = os.environ.get("AFC_TEST_CHROMEDRIVER") or shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


def available() -> bool:
    return _binaries() is not None


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    found = _binaries()
    if found is None:
        pytest.skip(SKIP)
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = found[0]
    for arg in (
        "--headless=new",
        "--no-sandbox",  # tests run as root in CI
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1280,1600",
    ):
        options.add_argument(arg)
    # Chromium makes its shared-memory files (``--disable-dev-shm-usage``) in folders under
    # TMPDIR and leaves the folders behind: a whole run of the suite left 33 empty
    # /tmp/org.chromium.Chromium.* folders. They go to the test's own temporary folder.
    env = {**os.environ, "TMPDIR": str(tmp_path_factory.mktemp("chromium"))}
    driver = webdriver.Chrome(service=Service(found[1], env=env), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


# Every <img> on the page, decoded: [alt, naturalWidth] (0 for one that failed to load).
# Every picture of the page once the whole document is parsed and loaded (a big report file
# on a busy machine may still be parsing when the driver hands the page back): [alt, width],
# width 0 for a picture that did not decode.
LOADED_IMAGES = """
const done = arguments[arguments.length - 1];
function collect() {
  const imgs = Array.from(document.images);
  Promise.all(imgs.map(i => i.decode().then(() => [i.alt, i.naturalWidth], () => [i.alt, 0])))
    .then(done);
}
if (document.readyState === "complete") collect();
else window.addEventListener("load", collect);
"""


class Served:
    """``afc serve`` in a child process, on a free port of 127.0.0.1 (or ``host``)."""

    def __init__(self, afc, *args: str, env: dict[str, str] | None = None):
        self.proc = subprocess.Popen(
            afc.command("serve", "--port", "0", *args),
            cwd=afc.cwd,
            env={**afc.env, **(env or {})},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        deadline = time.time() + 60
        while time.time() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.lines.append(line)
            found = re.search(r"at (http://\S+?/)[ ;]", line)
            if found:
                self.url = found.group(1)
                return
        self.proc.kill()
        raise AssertionError("afc serve did not start: " + "".join(self.lines))

    def stop(self) -> tuple[int, str]:
        """Ctrl-C, as a person stops it; its exit code and the rest of its stderr."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            rest = self.proc.communicate(timeout=30)[1]
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rest = self.proc.communicate()[1]
        return self.proc.returncode, "".join(self.lines) + rest


def served_pages(afc, *names: str) -> dict[str, str]:
    """The text of each page ``names`` (``""``: the contact sheet, ``"review"``...) as a
    browser would fetch it from an ``afc serve`` started for them and stopped after."""
    import httpx

    served = Served(afc)
    try:
        return {name: httpx.get(f"{served.url}{name}", timeout=30).text for name in names}
    finally:
        served.stop()


def ledger_state(path: Path) -> list[tuple]:
    """Everything a decision could change: the jobs, their events, their deliveries."""
    import sqlite3

    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT * FROM jobs ORDER BY id").fetchall()
        rows += conn.execute("SELECT * FROM events ORDER BY id").fetchall()
        rows += conn.execute("SELECT * FROM deliveries ORDER BY id").fetchall()
        return rows
    finally:
        conn.close()


def awaiting(afc, n: int = 3) -> None:
    """``n`` jobs rendered, stored and awaiting review (``review: true``)."""
    from conftest import jobs, manifest

    data = manifest(jobs(n, size="96x64"))
    data["defaults"]["review"] = True
    afc.write_manifest(data)
    afc("submit", "manifest.yaml")
    statuses = dict(afc.rows("SELECT key, status FROM jobs"))
    assert set(statuses.values()) == {"awaiting_review"}, statuses


def rendered_as(afc, key: str, data: bytes) -> None:
    """Job ``key``'s stored output made ``data``, as if its model had rendered those bytes:
    its file written and its SHA-256 and size in the ledger (bytes written over a verified
    output alone are said changed in storage since afc verified them, whatever they are)."""
    import hashlib
    import sqlite3

    [(output_key,)] = afc.rows("SELECT output_key FROM jobs WHERE key = ?", (key,))
    (afc.outputs() / output_key).write_bytes(data)
    conn = sqlite3.connect(afc.cwd / "afc.db")
    with conn:
        conn.execute(
            "UPDATE jobs SET output_sha256 = ?, output_size = ? WHERE key = ?",
            (hashlib.sha256(data).hexdigest(), len(data), key),
        )
    conn.close()


def status(afc, key: str) -> str:
    return afc.rows("SELECT status FROM jobs WHERE key = ?", (key,))[0][0]


def after_click(driver, element, timeout: float = 30):
    """Click ``element`` (a form's button) and wait for the page it loads: the old page's
    root goes stale, so no find that follows can read the page the click left."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    old = driver.find_element(By.TAG_NAME, "html")
    element.click()

    def gone(_driver) -> bool:
        try:
            old.is_enabled()
        except StaleElementReferenceException:
            return True
        except WebDriverException as exc:
            # caught mid-navigation, ChromeDriver may answer with an inspector error instead
            # of a stale reference (seen once in a full suite): the old page is gone all the same
            if "does not belong to the document" in (exc.msg or ""):
                return True
            raise
        return False

    WebDriverWait(driver, timeout).until(gone)
