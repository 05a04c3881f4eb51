"""The dashboard's queue page on a server with tenant queues: the tenant queue, the pending reason
and the predicted start of each waiting job come from the live API, not from made-up rows."""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from support.server import kill_jobs, start_server, toy, wait_for
from support.web import form_login

CONFIG = """\
queues:
  - name: research
    guarantee: 1
    borrow_limit: 0
    users: [admin]
  - name: prod
    guarantee: 1
    users: [bob]
"""


def test_queue_page_shows_tenant_queue_reason_and_prediction(tmp_path: Path) -> None:
    cfg = tmp_path / "server.yaml"
    cfg.write_text(CONFIG)
    state = tmp_path / "state"
    s = start_server(state, "--config", str(cfg), gpus=2, policy="fifo", round_seconds=1.0, grace=2.0)
    try:
        first = s.submit(toy(4000, 0.05), gpus=1, iterations=4000, name="holder")
        s.wait_state(first, "running")
        waiting = s.submit(toy(5, 0.01), gpus=1, iterations=5, name="queued<b>")  # research may not borrow
        wait_for(lambda: str(s.job(waiting).get("pending_reason")).startswith("queue at its")
                 and s.job(waiting).get("predicted_start"), what="the queue's pending reason and a predicted start")
        view = s.job(waiting)
        c = httpx.Client(base_url=s.url, timeout=20.0)
        r = form_login(c, s.admin_token, "/ui/queue")
        assert r.status_code == 303, r.text
        page = c.get("/ui/queue").text
        c.close()
        assert "<th>tenant queue</th>" in page and "<th>pending reason</th>" in page
        assert "<th>predicted start</th>" in page
        row = re.search(rf'<tr[^>]*><td>\d+</td><td><a href="/ui/jobs/{waiting}">.*?</tr>', page, re.S)
        assert row, page
        assert "research" in row.group(0) and view["pending_reason"] in row.group(0)
        assert "queued&lt;b&gt;" in row.group(0)
    finally:
        s.stop()
        kill_jobs(state)
