"""The web UI with many queues: `python -m bench.ui [--queues N] [--seconds S] [--no-browser]`.

Starts a fresh amqpd (in memory, statistics every 5 s as RabbitMQ's default), declares N queues (10,000 by
default) and reports:
- the HTTP API's time for the queue list page the UI asks for (100 rows, with its columns), by name, sorted
  by messages and filtered by a regular expression, and for the overview with its ten minutes of samples
  (median of 7 requests each);
- in headless chromium: the time from opening #/queues to its 100 rows on screen, and from loading the page
  (credentials in the tab) to the overview's totals on screen (median of 5);
- the broker's CPU over S seconds (60 by default) idle, then with the UI left open on the queue list, then on
  the overview, as a share of one core (from /proc, as bench.procstat reads it).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from typing import Any

import httpx
import pika

from amqpd.testing import BrokerProcess
from bench.procstat import cpu_seconds

LIST = (
    "/api/queues?page=1&page_size=100&pagination=true&columns=name,vhost,type,state,durable,auto_delete,exclusive,"
    "arguments,policy,consumers,messages,messages_ready,messages_unacknowledged,message_stats.publish_details.rate"
)
QUERIES = {
    "queue list page, by name": LIST,
    "queue list page, sorted by messages": LIST + "&sort=messages&sort_reverse=true",
    "queue list page, regex filter": LIST + "&name=%5Ebench-ui-0%5B0-4%5D&use_regex=true",
    "overview with 10 min of samples": (
        "/api/overview?msg_rates_age=600&msg_rates_incr=5&lengths_age=600&lengths_incr=5"
    ),
}


def declare(url: str, n: int) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    for i in range(n):
        ch.queue_declare(f"bench-ui-{i:05d}")
        if i % 10 == 0:
            ch.basic_publish("", f"bench-ui-{i:05d}", b"x" * 100)
    conn.close()


def api_times(base: str) -> dict[str, float]:
    out = {}
    with httpx.Client(base_url=base, auth=("guest", "guest"), timeout=60) as client:
        for label, path in QUERIES.items():
            times = []
            for _ in range(7):
                start = time.perf_counter()
                client.get(path).raise_for_status()
                times.append(time.perf_counter() - start)
            out[label] = statistics.median(times) * 1000
    return out


def browser(profile: str) -> Any:
    from selenium import webdriver

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1400,1000",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    return webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path="/usr/bin/chromedriver"))


# Sets the hash and resolves with the milliseconds until `css` matches `count` elements (or -1 after 30 s).
UNTIL = """
const [route, css, count, done] = arguments;
const start = performance.now();
if (route !== null) location.hash = route;
(function poll() {
  if (document.querySelectorAll(css).length >= count) return done(performance.now() - start);
  if (performance.now() - start > 30000) return done(-1);
  requestAnimationFrame(poll);
})();
"""
# After a fresh page load: the milliseconds since navigation started until `css` exists.
SINCE_LOAD = """
const [css, done] = arguments;
(function poll() {
  if (document.querySelector(css)) return done(performance.now());
  if (performance.now() > 30000) return done(-1);
  requestAnimationFrame(poll);
})();
"""


def load(driver: Any, url: str) -> None:
    """A fresh page load of url (a change of the hash alone would not reload the page)."""
    driver.get(url)
    driver.refresh()


def render_times(base: str) -> dict[str, float]:
    profile = tempfile.mkdtemp(prefix="amqpd-bench-ui-")
    driver = browser(profile)
    driver.set_script_timeout(60)
    try:
        driver.get(base + "/")
        driver.execute_script("sessionStorage.setItem('amqpd.credentials', btoa('guest:guest'))")
        list_ms, overview_ms = [], []
        for _ in range(5):
            load(driver, base + "/#/channels")
            driver.execute_async_script(SINCE_LOAD, "#whoami")
            list_ms.append(driver.execute_async_script(UNTIL, "#/queues", "#queue-table tbody tr", 100))
            load(driver, base + "/#/")
            overview_ms.append(driver.execute_async_script(SINCE_LOAD, "#totals td"))
        return {
            "queue list, 100 of the queues on screen": statistics.median(list_ms),
            "overview after a page load": statistics.median(overview_ms),
        }
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def cpu_share(pid: int, seconds: float) -> float:
    before, start = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    return (cpu_seconds(pid) - before) / (time.monotonic() - start) * 100


def cpu_with_ui(base: str, pid: int, seconds: float) -> dict[str, float]:
    out = {"broker CPU, no UI open (% of a core)": cpu_share(pid, seconds)}
    profile = tempfile.mkdtemp(prefix="amqpd-bench-ui-")
    driver = browser(profile)
    driver.set_script_timeout(60)
    try:
        driver.get(base + "/")
        driver.execute_script("sessionStorage.setItem('amqpd.credentials', btoa('guest:guest'))")
        for route, label, css, count in (
            ("#/queues", "queue list", "#queue-table tbody tr", 100),
            ("#/", "overview", "#totals td", 1),
        ):
            load(driver, base + "/" + route)
            if driver.execute_async_script(UNTIL, None, css, count) < 0:
                raise RuntimeError(f"the UI did not show {route}")
            out[f"broker CPU, UI open on the {label} (% of a core)"] = cpu_share(pid, seconds)
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--queues", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=60.0, help="each CPU measurement window")
    parser.add_argument("--no-browser", action="store_true", help="only the API timings")
    args = parser.parse_args()
    with BrokerProcess(management=True) as broker:
        assert broker.proc is not None
        start = time.perf_counter()
        declare(broker.url, args.queues)
        results: dict[str, Any] = {"queues": args.queues, "declare_s": round(time.perf_counter() - start, 1)}
        results.update({f"API {k} (ms)": round(v, 1) for k, v in api_times(broker.mgmt_url).items()})
        if not args.no_browser:
            results.update({f"render {k} (ms)": round(v, 1) for k, v in render_times(broker.mgmt_url).items()})
            results.update(
                {k: round(v, 2) for k, v in cpu_with_ui(broker.mgmt_url, broker.proc.pid, args.seconds).items()}
            )
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
