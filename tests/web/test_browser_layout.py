"""The dashboard at a desktop's and a phone's width, in Debian's Chromium (issue 30).

At 1440 and 390 px, every page: no horizontal page scroll (wide tables scroll in their own box),
the header as wide as the page, charts inside the screen, a footer in the flow (it covers nothing),
every job label at WCAG AA contrast (4.5:1) or better, no request to any host but the server, and
a held job's badge says "held". Screenshots of each page at each
width go to out/test-screenshots/ (look at them).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from support.server import Server, kill_jobs, start_server, toy
from support.web import login, shot

expect = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e '.[dev]')"
                             ).expect

QUEUES = """\
queues:
  - name: research
    guarantee: 2
    users: [admin]
  - name: prod
    guarantee: 2
    users: [bob]
"""
WIDTHS = (1440, 390)
PAGES = ("/ui/cluster", "/ui/queue", "/ui/jobs", "/ui/usage", "/ui/queues", "/ui/admin")

#: The page's measurements: widths, and each job label's text and background colours.
MEASURE = """() => {
  const rgb = s => (s.match(/[\\d.]+/g) || []).slice(0, 3).map(Number);
  const f = v => { v /= 255; return v <= 0.04045 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
  const lum = c => { const [r, g, b] = c.map(f); return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
  const ratio = (a, b) => {
    const [hi, lo] = [lum(a), lum(b)].sort((x, y) => y - x);
    return (hi + 0.05) / (lo + 0.05);
  };
  const labels = [...document.querySelectorAll(".gpu .slot[data-job]")].map(el => {
    const s = getComputedStyle(el);
    return {job: el.dataset.job, ratio: ratio(rgb(s.color), rgb(s.backgroundColor))};
  });
  const header = document.querySelector("header.top").getBoundingClientRect();
  const canvases = [...document.querySelectorAll("canvas")].map(c => Math.round(c.getBoundingClientRect().right));
  return {scroll: document.documentElement.scrollWidth, inner: window.innerWidth,
          header: Math.round(header.right - header.left), labels: labels, charts: canvases,
          footer: getComputedStyle(document.querySelector("footer")).position};
}"""


@pytest.fixture(scope="module")
def layout_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    base = tmp_path_factory.mktemp("layout")
    (base / "queues.yaml").write_text(QUEUES)
    s = start_server(base / "state", "--config", str(base / "queues.yaml"), gpus=4, policy="fifo",
                     round_seconds=1.0, grace=1.0)
    yield s
    s.stop()
    kill_jobs(base / "state")


def _only_local(page: Any) -> list[str]:
    outside: list[str] = []

    def route(r: Any) -> None:
        if httpx.URL(r.request.url).host in ("127.0.0.1", "localhost"):
            r.continue_()
        else:
            outside.append(r.request.url)
            r.abort()

    page.route("**/*", route)
    return outside


def test_pages_fit_the_screen_label_contrast_and_no_outside_requests(layout_server: Server, browser: Any) -> None:
    s = layout_server
    names = ("resnet50-with-a-rather-long-experiment-name-that-does-not-fit", "bert-base", "gpt-small")
    running = [s.submit(toy(100000, 0.05), gpus=1, name=n, iterations=100000) for n in names]
    held = s.submit(toy(100, 0.01), gpus=1, name="held-one", iterations=100, hold=True)
    s.submit(toy(100000, 0.05), gpus=4, name="vgg19-4gpu", iterations=100000)
    for j in running:
        s.wait_state(j, "running")
    try:
        for width in WIDTHS:
            ctx = browser.new_context(viewport={"width": width, "height": 900})
            page = ctx.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda e, errors=errors: errors.append(str(e)))
            outside = _only_local(page)
            login(page, s.url, s.admin_token)
            expect(page.locator(".gpu .slot[data-job]")).to_have_count(3, timeout=45000)
            expect(page.locator("#history-gpus canvas")).to_have_count(1)
            for path in (*PAGES, f"/ui/jobs/{held}", f"/ui/jobs/{running[0]}", "/docs", "/redoc"):
                page.goto(s.url + path)
                page.wait_for_load_state("networkidle")
                if path in ("/ui/usage", "/ui/cluster"):
                    expect(page.locator(".chart canvas").first).to_be_visible()
                if path == "/redoc":
                    expect(page.get_by_text("/v1/queue", exact=False).first).to_be_attached(timeout=45000)
                    continue  # ReDoc's own layout; what matters here is that it asks nobody else
                if path == "/docs":
                    continue
                m = page.evaluate(MEASURE)
                label = f"{path} at {width} px"
                assert m["scroll"] <= m["inner"], f"{label}: the page is {m['scroll']} px wide, the screen {m['inner']}"
                assert m["header"] >= m["inner"] - 1, f"{label}: the header ends at {m['header']} px"
                assert all(right <= m["inner"] for right in m["charts"]), f"{label}: a chart ends at {m['charts']} px"
                assert m["footer"] in ("static", "relative"), f"{label}: the footer is {m['footer']}: it covers text"
                for lab in m["labels"]:
                    assert lab["ratio"] >= 4.5, f"{label}: job {lab['job']}'s label contrast is {lab['ratio']:.2f}:1"
                if path == "/ui/cluster":
                    assert len(m["labels"]) == 3
                name = path.strip("/").replace("/", "-").replace("ui-", "") or "root"
                shot(page, f"layout-{width}-{'job-held' if path.endswith(str(held)) else name}")
            page.goto(f"{s.url}/ui/jobs/{held}")
            expect(page.get_by_test_id("job-state")).to_have_text("held")
            expect(page.get_by_test_id("release")).to_be_visible()
            assert "tesserae release" not in page.content()
            page.goto(f"{s.url}/ui/jobs?state=queued")
            expect(page.locator(f"tr[data-job='{held}'] [data-testid=state]")).to_have_text("held")
            assert outside == [], f"at {width} px the dashboard asked the network for {outside}"
            assert not errors, errors
            ctx.close()
        _history_and_usage_count_only_the_servers_time(s)
    finally:
        for j in s.client().get("/v1/jobs").json()["jobs"]:
            if j["state"] in ("queued", "running", "preempted"):
                s.client().post(f"/v1/jobs/{j['id']}/cancel")



def _history_and_usage_count_only_the_servers_time(s: Server) -> None:
    """The history is a step series of busy GPUs and waiting jobs from the server's start (the three
    running jobs; the held and the 4-GPU job waiting); usage says since when it counts and gives no
    utilisation for time before the server."""
    c = s.client()
    h = c.get("/v1/cluster/history", params={"window": 86400}).json()
    assert h["total_gpus"] == 4 and h["t"][0] == pytest.approx(h["start"], abs=1e-3) and h["start"] > h["end"] - 3600
    assert len(h["t"]) == len(h["gpus"]) == len(h["queued"])
    assert h["gpus"][-1] == 3 and h["queued"][-1] == 2
    u = c.get("/v1/usage", params={"window": 86400, "bins": 48}).json()
    assert u["since"] == pytest.approx(h["start"], abs=1e-3) and u["utilization"][0] is None
    assert 0.5 < u["utilization_mean"] <= 0.75  # 3 of 4 GPUs busy since shortly after the start
    assert c.get("/v1/cluster/history", params={"points": 1}).status_code == 422
    r = httpx.get(s.url + "/redoc")
    assert "img-src 'self' data:" in r.headers["content-security-policy"]
    assert "cdn" not in r.text and "googleapis" not in r.text
