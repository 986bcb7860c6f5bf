"""A lab run from the page runs under the worker, never under Streamlit.

The real app (``streamlit run``) and its worker (``python -m academy.worker``,
started beside it as ``make run`` does) on a temporary database; a guest
presses Run in Chromium while a thread reads /proc every 20 ms and notes, for
every lab process it sees (the CLI and its ranks), which of the two it
descends from.
"""

from __future__ import annotations

import contextlib
import threading

import pytest

from tests.browserkit import alert, button, main, nav, pattern, wait_app
from tests.labstack import descendants, is_lab, parent_of

pytestmark = [pytest.mark.browser, pytest.mark.slow]

LANG = "en"


class Watch(threading.Thread):
    """Samples the process trees under the app and under the worker until stopped."""

    def __init__(self, app_pid: int, worker_pid: int):
        super().__init__(daemon=True)
        self.app_pid, self.worker_pid = app_pid, worker_pid
        self.under_app: set[int] = set()
        self.app_children: set[int] = set()
        self.labs: set[int] = set()
        self.ranks: set[int] = set()  # lab processes whose parent is a lab process
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.02):
            below_app = descendants(self.app_pid)
            self.app_children.update(below_app)
            self.under_app.update(p for p in below_app if is_lab(p))
            for pid in descendants(self.worker_pid):
                if is_lab(pid):
                    self.labs.add(pid)
                    if is_lab(parent_of(pid) or 0):
                        self.ranks.add(pid)


def test_the_ranks_of_a_lab_run_from_the_page_are_under_the_worker(server, browser, artifacts):
    assert server.worker is not None and server.worker.poll() is None, "the app's worker is up"
    ctx = browser.new_context(viewport={"width": 1300, "height": 900}, locale="en-US")
    page = ctx.new_page()
    watch = Watch(server.proc.pid, server.worker.pid)
    watch.start()
    try:
        page.goto(f"{server.url}/?lang={LANG}")
        wait_app(page)
        nav(page, "nav.labs", LANG)
        m = main(page)
        button(m.get_by_test_id("stForm"), "labs.run", LANG).click()
        alert(page, pattern("labs.done", LANG), timeout=150_000)
        wait_app(page)
    except BaseException:
        with contextlib.suppress(Exception):
            page.screenshot(path=str(artifacts / "lab-worker-FAILED.png"), full_page=True)
        raise
    finally:
        watch.done.set()
        watch.join()
        with contextlib.suppress(Exception):
            ctx.close()
    assert watch.ranks, f"no rank seen under the worker (lab processes seen: {watch.labs})"
    assert watch.under_app == set(), "a lab process ran under the Streamlit server"
    assert not (watch.app_children & watch.labs)
