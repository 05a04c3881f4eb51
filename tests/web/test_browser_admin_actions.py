"""Admin actions in a real browser (issue 30): drain and undrain a node from the cluster page's node
health section, and cancel jobs in bulk from the Admin page after a confirmation that shows the
count. Both forms are CSRF-checked (a forged post is refused over HTTP too). Screenshots go to
out/test-screenshots/."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from support.server import PY, Server, wait_for
from support.web import end_all_jobs, form_login, login, shot

expect = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e '.[dev]')"
                             ).expect
SLOW = 45000


def _sleeper(seconds: float) -> list[str]:
    return [PY, "-c", f"import time; time.sleep({seconds})"]


def test_drain_and_undrain_a_node_from_the_cluster_page(web_server: Server, page_of: Any) -> None:
    s = web_server
    node = s.client().get("/v1/nodes").json()["nodes"][0]
    running = s.submit(_sleeper(600), gpus=1, name="keeps-running")
    s.wait_state(running, "running")
    page = page_of()
    page.on("dialog", lambda d: d.accept())
    login(page, s.url, s.admin_token)
    row = page.locator(f"tr[data-node='{node['name']}']")
    row.get_by_test_id("drain").click()  # confirm() accepted
    expect(page.locator(".flash")).to_contain_text(f"Node {node['name']} drained")
    expect(row.get_by_test_id("drained")).to_have_text("drained")
    assert s.client().get("/v1/nodes").json()["nodes"][0]["drained"]["by"] == "admin"
    waiting = s.submit(_sleeper(1), gpus=1, name="waits-for-the-drain")
    wait_for(lambda: "0 free" in (s.job(waiting)["pending_reason"] or ""), 10.0, what="the drained reason")
    assert s.job(running)["state"] == "running", "the drained node's job goes on"
    shot(page, "cluster-node-drained")
    row.get_by_test_id("undrain").click()
    expect(page.locator(".flash")).to_contain_text("is back in service")
    s.wait_state(waiting, ("running", "completed"))
    end_all_jobs(s)


def test_a_user_sees_no_drain_button_and_a_forged_post_is_refused(web_server: Server) -> None:
    s = web_server
    erin = s.client().post("/v1/tokens", json={"user": "erin-nodes"}).json()["token"]
    c = httpx.Client(base_url=s.url, timeout=20.0)
    s.clients.append(c)
    assert form_login(c, erin).status_code == 303
    page = c.get("/ui/cluster").text
    assert 'data-testid="drain"' not in page
    csrf = re.search(r'name="csrf" value="([^"]+)"', page)
    assert csrf
    r = c.post("/ui/nodes/0/drain", data={"csrf": csrf.group(1)})
    assert r.status_code == 303 and "only an admin token" in c.get("/ui/cluster").text
    admin = httpx.Client(base_url=s.url, timeout=20.0)
    s.clients.append(admin)
    assert form_login(admin, s.admin_token).status_code == 303
    assert admin.post("/ui/nodes/0/drain", data={"csrf": "forged"}).status_code == 403
    assert admin.post("/ui/admin/bulk", data={"csrf": "forged", "user": "admin"}).status_code == 403
    assert s.client().get("/v1/nodes").json()["nodes"][0]["drained"] is None


def test_bulk_cancel_from_the_admin_page_shows_the_count_first(web_server: Server, page_of: Any) -> None:
    s = web_server
    blocker = s.submit(_sleeper(600), gpus=4, name="blocker")
    s.wait_state(blocker, "running")
    sweep = [s.submit(_sleeper(1), gpus=1, name="sweep") for _ in range(3)]
    other = s.submit(_sleeper(1), gpus=1, name="other")
    page = page_of()
    login(page, s.url, s.admin_token, "/ui/admin")
    form = page.get_by_test_id("bulk-cancel")
    form.locator("input[name=name]").fill("sweep")
    form.locator("select[name=state]").select_option("queued")
    form.locator("button[type=submit]").click()
    confirm = page.get_by_test_id("bulk-confirm")
    expect(confirm).to_contain_text("3 jobs")
    assert [s.job(j)["state"] for j in sweep] == ["queued"] * 3, "nothing is cancelled before the confirmation"
    shot(page, "admin-bulk-cancel-confirm")
    late = s.submit(_sleeper(1), gpus=1, name="sweep")  # after the count: not cancelled by this confirmation
    page.get_by_test_id("bulk-confirm-button").click()
    expect(page.locator(".flash")).to_contain_text("Cancelled 3 jobs")
    for j in sweep:
        s.wait_state(j, "cancelled")
    assert s.job(other)["state"] == "queued" and s.job(late)["state"] == "queued"
    assert s.job(blocker)["state"] == "running"
    shot(page, "admin-bulk-cancelled")
    end_all_jobs(s)
