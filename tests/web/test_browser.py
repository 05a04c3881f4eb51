"""End-to-end tests in a real browser (headless Chromium driven by Playwright).

A server with 4 virtual GPUs runs the toy trainer. The tests log in through the form, watch a job
go queued -> running -> completed with no reload, cancel a job from its page, get refused another
user's job, see that hostile job names stay text, load /docs with every non-local request blocked,
and open a compare report and the results viewer. Screenshots go to out/test-screenshots/.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.server import PY, REPO, Server, toy, wait_for
from support.web import end_all_jobs, login, shot

expect = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e '.[dev]')"
                             ).expect

HOSTILE = '<img src=x onerror="window.__xss=1"><script>window.__xss=1</script> & "quotes"'
SLOW = 15000 * 3
expect.set_options(timeout=15000)


def test_login_watch_a_job_and_cancel_from_its_page(web_server: Server, page_of: Any) -> None:
    s = web_server
    page = page_of()
    page.goto(s.url + "/ui/jobs")
    assert "/ui/login" in page.url, "a visitor without a session is sent to the login form"
    page.fill("#token", "tsr_not-a-real-token")
    page.click("button[type=submit]")
    expect(page.get_by_test_id("login-error")).to_contain_text("not valid")
    assert "tsr_" not in page.url
    shot(page, "login-bad-token")
    page.fill("#token", s.admin_token)
    page.click("button[type=submit]")
    page.wait_for_url("**/ui/jobs")
    assert s.admin_token not in page.url and s.admin_token not in page.content()
    cookies = page.context.cookies()
    assert [c["httpOnly"] for c in cookies if c["name"] == "tesserae_session"] == [True]

    blocker = s.submit(toy(100000, 0.05), gpus=4, name="blocker", iterations=100000)
    s.wait_state(blocker, "running")
    watched = s.submit(toy(120, 0.05), gpus=2, name=HOSTILE, iterations=120)
    page.goto(f"{s.url}/ui/jobs/{watched}")
    state = page.get_by_test_id("job-state")
    expect(state).to_have_text("queued")
    expect(page.get_by_test_id("job-name")).to_have_text(HOSTILE)
    page.evaluate("window.__marker = 'same page'")

    other = page.context.new_page()
    other.on("dialog", lambda d: d.accept())
    other.goto(f"{s.url}/ui/jobs/{blocker}")
    other.get_by_test_id("cancel").click()  # the confirm() dialog is accepted
    expect(other.locator(".flash")).to_contain_text(f"Job {blocker}: cancellation requested")
    expect(other.get_by_test_id("job-state")).to_have_text("cancelled", timeout=SLOW)
    shot(other, "job-cancelled")

    expect(state).to_have_text("running", timeout=SLOW)
    shot(page, "job-running")
    expect(state).to_have_text("completed", timeout=SLOW)
    expect(page.get_by_test_id("log")).to_contain_text("toy:", timeout=SLOW)
    assert page.evaluate("window.__marker") == "same page", "the page updated itself without a reload"
    assert page.evaluate("window.__xss") is None, "a job name was run as HTML"
    assert float(page.get_by_test_id("progress").get_attribute("value") or 0) == 120
    shot(page, "job-completed")

    page.goto(s.url + "/ui/jobs?state=completed")
    expect(page.locator(f"tr[data-job='{watched}'] td.name")).to_have_text(HOSTILE)
    assert page.locator(f"tr[data-job='{blocker}']").count() == 0, "the state filter keeps completed jobs only"
    assert page.evaluate("window.__xss") is None


def test_another_users_job_is_refused(web_server: Server, page_of: Any) -> None:
    s = web_server
    alice = s.client().post("/v1/tokens", json={"user": "alice"}).json()["token"]
    mine = s.submit(toy(5, 0.01), gpus=1, token=alice, name="alice-job", iterations=5)
    admins = s.submit(toy(5, 0.01), gpus=1, name="admin-secret-name", iterations=5)
    for j in (mine, admins):
        s.wait_state(j, "completed")
    page = page_of()
    login(page, s.url, alice, "/ui/jobs")
    expect(page.get_by_test_id("user")).to_have_text("alice")
    assert page.locator(f"tr[data-job='{mine}']").count() == 1
    assert page.locator(f"tr[data-job='{admins}']").count() == 0, "a user sees only their own jobs"
    response = page.goto(f"{s.url}/ui/jobs/{admins}")
    assert response.status == 403
    expect(page.get_by_test_id("error-message")).to_contain_text("belongs to another user")
    assert "admin-secret-name" not in page.content()
    shot(page, "job-of-another-user")
    response = page.goto(f"{s.url}/ui/jobs/987654")
    assert response.status == 404
    expect(page.get_by_test_id("error-message")).to_contain_text("does not exist")
    assert "Traceback" not in page.content()
    response = page.goto(f"{s.url}/ui/jobs/not-a-number")
    assert response.status == 404
    response = page.goto(f"{s.url}/ui/no-such-page")
    assert response.status == 404
    # A revoked or unknown session is sent back to the login form.
    page.context.clear_cookies()
    page.goto(f"{s.url}/ui/cluster")
    assert "/ui/login" in page.url


def test_cluster_queue_and_usage_pages(web_server: Server, page_of: Any) -> None:
    s = web_server
    running = [s.submit(toy(100000, 0.05), gpus=g, name=n, iterations=100000)
               for g, n in ((2, "resnet50-ddp"), (1, "bert-base"), (1, "gpt-small"))]
    for g, n in ((4, "vgg19-4gpu"), (1, "dcgan")):
        s.submit(toy(100000, 0.05), gpus=g, name=n, iterations=100000)
    for j in running:
        s.wait_state(j, "running")
    page = page_of()
    login(page, s.url, s.admin_token)
    expect(page.get_by_test_id("gpus-in-use")).to_have_text("4 / 4", timeout=SLOW)
    for j in running:
        expect(page.locator(f".gpu [data-job='{j}']").first).to_be_visible()
    assert page.locator(".gpu .slot[data-job]").count() == 4
    page.wait_for_timeout(2500)  # one live refresh, so the screenshot shows the running jobs' progress
    shot(page, "cluster")

    page.goto(s.url + "/ui/queue")
    rows = page.get_by_test_id("queue").locator("tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.nth(0)).to_contain_text("vgg19-4gpu")  # FIFO: the older waiting job first
    expect(rows.nth(1)).to_contain_text("dcgan")
    shot(page, "queue")

    page.goto(s.url + "/ui/usage?window=1%20h")
    expect(page.locator("#chart-util canvas")).to_have_count(1)
    expect(page.locator("#chart-users canvas")).to_have_count(1)
    expect(page.get_by_test_id("usage")).to_contain_text("admin")
    shot(page, "usage")
    end_all_jobs(s)
    expect(page.get_by_test_id("usage")).to_contain_text("admin")


def test_docs_render_with_no_network(web_server: Server, page_of: Any) -> None:
    page = page_of()
    outside: list[str] = []

    def only_local(route: Any) -> None:
        host = httpx.URL(route.request.url).host
        if host not in ("127.0.0.1", "localhost"):
            outside.append(route.request.url)
            route.abort()
        else:
            route.continue_()

    page.route("**/*", only_local)
    page.goto(web_server.url + "/docs")
    expect(page.locator(".opblock").first).to_be_visible()
    assert page.locator(".opblock").count() >= 10
    expect(page.locator(".opblock-summary-path", has_text=re.compile(r"^/v1/queue$"))).to_have_count(1)
    assert outside == [], f"/docs asked the network for {outside}"
    shot(page, "docs")


@pytest.fixture(scope="module")
def compare_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cmp") / "out"
    subprocess.run([PY, "-m", "tesserae.cli", "compare", "--run", "fifo", "--run", "las", "--run",
                    "tiresias-las:tiresias", "--jobs", "150", "--load", "1.3", "--cluster", "8x4", "--seed", "2",
                    "--out", str(out), "--quiet"], check=True, cwd=REPO, capture_output=True, timeout=300)
    return out


def test_compare_report_opens_offline(compare_out: Path, page_of: Any) -> None:
    page = page_of()
    outside: list[str] = []
    page.route("**/*", lambda route: (outside.append(route.request.url), route.abort())
               if not route.request.url.startswith("file://") else route.continue_())
    page.goto((compare_out / "report.html").as_uri())
    table = page.get_by_test_id("compare-table")
    expect(table.locator("thead th")).to_have_count(4)
    expect(table).to_contain_text("las:consolidated")
    expect(table.locator(".ratio-better, .ratio-worse").first).to_be_visible()
    expect(page.locator("#cdf canvas")).to_have_count(1)
    expect(page.locator("#timeline-gpus canvas")).to_have_count(1)
    page.locator("#why-longest a").first.click()
    expect(page.get_by_test_id("why-out")).to_contain_text("waited")
    assert outside == [], f"the report asked the network for {outside}"
    shot(page, "compare-report")


def test_results_viewer_explains_any_job(compare_out: Path, page_of: Any) -> None:
    proc = subprocess.Popen([PY, "-m", "tesserae.cli", "view", str(compare_out), "--port", "0"], cwd=REPO,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        m = re.search(r"(http://127\.0\.0\.1:\d+/)", line)
        assert m, line
        url = m.group(1)
        wait_for(lambda: httpx.get(url, timeout=2).status_code == 200, 20, 0.1, "the viewer")
        page = page_of()
        page.goto(url)
        page.select_option("#why-run", label="las:consolidated")
        page.fill("#why-job", "7")
        page.click("#why button[type=submit]")
        out = page.get_by_test_id("why-out")
        expect(out).to_contain_text("Job 7")
        expect(out).to_contain_text("Under fifo:consolidated the same job")
        page.fill("#why-job", "100000")
        page.click("#why button[type=submit]")
        expect(out).to_contain_text("is not in run las:consolidated")
        page.fill("#why-job", "7")
        page.click("#why button[type=submit]")
        expect(out).to_contain_text("Job 7")
        shot(page, "viewer")
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
