"""Take the screenshots of docs/dashboard.md: a private Redis, a worker and the dashboard
for :mod:`examples.dashboard_demo`, some load, then each page in headless Chromium.

    .venv/bin/python -m examples.dashboard_screenshots [OUT_DIR]   # default docs/dashboard

Needs Debian's ``chromium`` and ``chromium-driver`` and the test extra (Selenium). The last
hour's per-minute buckets are seeded under a pseudo-worker id, so the charts have an hour to
show; every other figure is what the real worker did.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service

from examples import dashboard_demo as demo
from taskq.broker.series import MINUTE_MS, Series, minute_of
from taskq.ops.devserver import RedisServer, free_port

ROOT = Path(__file__).resolve().parent.parent


def spawn(url: str, *args: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "TASKQ_REDIS_URL": url, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "taskq", "-A", "examples.dashboard_demo", *args]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, start_new_session=True)


def seed_history(app: demo.App) -> None:
    series = Series(app.link)
    now = minute_of(series.link_ms())
    rng = random.Random(7)
    for i in range(1, 60):
        ok = int(300 + 200 * abs(((i % 20) - 10) / 10) + rng.randint(0, 80))
        failed = rng.randint(0, 25) if i % 13 else 90
        series.write(["tasks"], "history:0:000000", now - i * MINUTE_MS, (ok, failed, failed, 0))


def load(app: demo.App) -> str:
    """Jobs of every kind; returns the id of one that failed for good."""
    for n in range(40):
        demo.resize_image.delay(n, width=random.choice((320, 800, 1600)))
        demo.charge_card.delay(f"order-{1000 + n}", 100 * n + 99)
    for n in range(3):
        demo.build_report.delay(f"Q{n + 1}-2026")
    dead = [demo.sync_to_crm.delay(7000 + n) for n in range(6)]
    demo.resize_image.apply_async((99,), countdown=600)
    for n in range(1500):
        demo.resize_image.apply_async((n,), priority="low", countdown=0)
    return dead[0].id


def shoot(browser: webdriver.Chrome, url: str, path: Path) -> None:
    """The whole page, as tall as it is (the viewport is resized to the document)."""
    metrics = {"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": False}
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
    browser.get(url)
    time.sleep(0.5)
    height = browser.execute_script("return document.documentElement.scrollHeight")
    metrics["height"] = min(int(height), 2400)
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
    time.sleep(0.3)
    browser.save_screenshot(str(path))
    print("wrote", path)


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "docs" / "dashboard")
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        server = RedisServer(Path(tmp))
        server.start()
        procs: list[subprocess.Popen[bytes]] = []
        try:
            demo.app.settings = demo.app.settings.replace(redis_url=server.url)
            port = free_port()
            procs.append(spawn(server.url, "worker", "-c", "3", "-Q", "tasks"))
            procs.append(spawn(server.url, "dashboard", "--port", str(port)))
            dead_job = load(demo.app)
            seed_history(demo.app)
            base = f"http://127.0.0.1:{port}"
            for _ in range(100):
                try:
                    urllib.request.urlopen(base + "/static/dashboard.css").close()
                    break
                except OSError:
                    time.sleep(0.1)
            time.sleep(8)  # the worker gets through the quick jobs, the reports run
            options = Options()
            options.binary_location = "/usr/bin/chromium"
            for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"):
                options.add_argument(arg)
            browser = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
            try:
                shoot(browser, base + "/", out / "overview.png")
                shoot(browser, base + "/workers", out / "workers.png")
                shoot(browser, f"{base}/jobs/{dead_job}", out / "job.png")
                shoot(browser, base + "/deadletters", out / "deadletters.png")
                link = browser.find_element("css selector", "#deadletters td a")
                shoot(browser, str(link.get_attribute("href")), out / "deadletter.png")
                shoot(browser, base + "/periodic", out / "periodic.png")
            finally:
                browser.quit()
        finally:
            for p in procs:
                os.killpg(p.pid, signal.SIGTERM)
                p.wait(20)
            server.stop()


if __name__ == "__main__":
    main()
