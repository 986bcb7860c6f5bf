"""F-1 end to end: the stall PDF uploaded on the real Verify page in Chromium
gets a clear refusal, and the server process itself does not pay for it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import certificates as certs
from academy.db import session_scope
from tests import browserkit as kit
from tests.test_cert_upload import stall_pdf, token_of


def server_cpu_seconds(pid: int) -> float:
    """utime + stime of the server process alone (children are the reader's own cost)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.browser
@pytest.mark.usefixtures("on_server_db")
def test_stall_pdf_upload_is_refused_without_costing_the_server(server, browser):
    with session_scope() as s:
        cert = certs.issue_certificate(session=s, learner_id=None, attempt_id=None, name="Ann", lang="en",
                                       score=90, pass_date="2026-11-30")
        data = stall_pdf(token_of(certs.render_pdf(cert)))  # 30 pages x 1 MiB of text operators, ~8 KB
    ctx = browser.new_context(locale="en-US")
    page = ctx.new_page()
    page.goto(f"{server.url}/verify?lang=en")
    kit.wait_app(page)
    before = server_cpu_seconds(server.proc.pid)
    page.locator("input[type=file]").set_input_files(
        files=[{"name": "stall.pdf", "mimeType": "application/pdf", "buffer": data}])
    kit.alert(page, certs.texts("en")["status"]["pages"])
    spent = server_cpu_seconds(server.proc.pid) - before
    ctx.close()
    print(f"server CPU for the stall PDF upload: {spent:.2f} s")
    # Before the fix the server parsed all 30 pages itself: 48 s of its CPU.
    # Now it spends a page run and a child's start; the bound is generous.
    assert spent < 10, f"the server process spent {spent:.1f} s of CPU"
