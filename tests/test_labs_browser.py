"""Every lab, run once from the Labs page in a real browser: its animation, readouts and timeline.

One guest (one browser page, one Streamlit session, so the visit's runs stay
in its history) runs each lab with the form's defaults, each once, and reads
each result in en, zh and nl through the sidebar's language box:

- the ring lab with each algorithm: the animation played to its last step
  (chunks for the ring and the pipelined ring, whole buffers for the naive
  one; ``test-artifacts/lab-ring-<algo>.png``), and for the ring and the
  naive ring the readouts of issue #22;
- the benchmark; after it the two ring runs, brought back from the visit's
  history, draw the step chart's model line from its fit (the line is
  looked up when the result is drawn: ``app.labviews.model_line`` with
  ``academy.labruns.pages.run_machine_fit``, not stored with the run, so
  English before the benchmark shows the default line);
- DDP with a predicted step time: its readouts, its timeline (issue #25: swim
  lanes, overlap, the cap slider, the trace download), "predict, then
  measure" beside the step model, whose fit the run made itself, and the
  breakdown's line of what overlap would hide where communication takes no
  compute (issue #36), in each language;
- sharding: the checks, the ledger, the wire bytes and the shard map played;
- compression at its fewest steps (the slider's Home key): its readouts, the
  Pareto plot and its table, and axe-core finding nothing of ours, in nl, zh
  and en;
- topology, with its fastest link (two namespaces where the worker may make
  them, else the loopback, which the result then says): its readouts, and
  the clock's ratio chart naming both hardware targets, in each language;
- the straggler lab and the failure lab (torchrun with ``--max-restarts``,
  issue #41) with the form's defaults: their readouts, the failure lab's work
  by step, and axe-core finding nothing of ours, in two languages each.

Readouts are photographed at 1400 px and 390 px:
``test-artifacts/lab-result-<run>-<lang>-<width>.png``; the timeline as
``lab-timeline-<lang>-<width>.png``, ``lab-predict-<lang>-1400.png`` and
``lab-overlap-<lang>-1400.png``; the
sharding lab as ``lab-sharding-<lang>[-wire|-map].png``.

The tests run in this order on one worker (their xdist group) and share the
page: each starts from the state the one before left.
"""

from __future__ import annotations

import contextlib
import re

import pytest

from academy.i18n import languages, t
from tests.browserkit import (
    WAIT,
    alert,
    axe_ours,
    button,
    charts_fitted,
    choose,
    main,
    pattern,
    see,
    switch_language,
    wait_app,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow]

RANKS = 3  # the ring lab's default
# algo -> steps with the form's default 3 ranks, and what the last frame's arrows say travels
ALGOS = {"ring": (4, "widgets.ring.chunk"), "pipelined": (4, "widgets.ring.chunk"),
         "naive": (2, "widgets.ring.rank")}  # a naive arrow names the rank whose buffer it carries
# name in the file -> (lab, what the result must show, what to look for)
READOUTS = {"ring": ("ring", "labs.ring.noise", "labs.look.ring"),
            "naive": ("ring", "labs.ring.noise", "labs.look.ring_naive"),
            "bench": ("bench", "labs.bench.noise", "labs.look.bench"),
            "ddp": ("ddp", "labs.ddp.bucketing_why", "labs.look.ddp"),
            "compression": ("compression", "compression.curves_caption", "labs.look.compression"),
            "topology": ("topology", "topology.clock_title", "labs.look.topology"),
            "straggler": ("straggler", "straggler.model_title", "labs.look.straggler"),
            "failure": ("failure", "failure.timeline_title", "labs.look.failure")}
WIDTHS = (1400, 390)
HEIGHT = """() => Math.max(...['stMain', 'stAppViewContainer', 'stMainBlockContainer']
    .map(id => document.querySelector(`[data-testid="${id}"]`)?.scrollHeight || 0))"""
# The sharding map shows its last phase, and that frame's transition has ended.
LAST_FRAME = """([el, last]) => (el.querySelector('.gtitle')?.textContent || '').startsWith(last)
    && !el._transitioning"""


@pytest.fixture(scope="module")
def page(server, browser):
    """One guest for the whole module, on the Labs page in English."""
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000}, locale="en-US")
    pg = ctx.new_page()
    pg.goto(f"{server.url}/labs?lang=en&lab=ring")
    wait_app(pg)
    yield pg
    with contextlib.suppress(Exception):
        ctx.close()


def shown_pattern(key: str, lang: str) -> re.Pattern[str]:
    """`pattern` of a catalog text written in Markdown, as the page shows it (no ``**``)."""
    return re.compile(pattern(key, lang).pattern.replace(re.escape("**"), ""))


def speak(page, lang: str) -> None:
    """Read on in ``lang`` (the sidebar's language box; the run stays in the session)."""
    if not re.search(rf"[?&]lang={lang}\b", page.url):
        page.set_viewport_size({"width": 1400, "height": 1000})
        switch_language(page, lang)


def pick_lab(page, lab: str, lang: str) -> None:
    m = main(page)
    if not re.search(rf"[?&]lab={lab}\b", page.url):
        m.get_by_test_id("stRadio").get_by_text(t(f"labs.lab_{lab}", lang), exact=True).click()
        page.wait_for_url(re.compile(rf"[?&]lab={lab}\b"), timeout=WAIT)
        wait_app(page)


def run(page, lab: str, lang: str, *, algo: str | None = None, guess: str | None = None) -> None:
    """Run ``lab`` with the form's defaults (``algo`` picked, a predicted step time written)
    and wait for its result, not the previous run's; again if the worker was lost."""
    page.set_viewport_size({"width": 1400, "height": 1000})
    pick_lab(page, lab, lang)
    m = main(page)
    if algo:
        choose(page, lang, "labs.algo", t(f"labs.algo_{algo}", lang))
    if lab == "topology":  # the fastest link the form offers: the run stays short on 2 cores
        choose(page, lang, "topology.rate", t("topology.rate_1000", lang))
    if guess:  # predict, then measure: a guess written before the run comes back beside the model
        m.get_by_role("spinbutton", name=t("labs.predict.field", lang)).fill(guess)
    for attempt in range(2):
        button(m.get_by_test_id("stForm"), "labs.run", lang).click()
        # The run's own live view, then its result.
        button(m, "labs.cancel", lang).wait_for(timeout=WAIT)
        button(m, "labs.cancel", lang).wait_for(state="detached", timeout=240_000)
        wait_app(page)
        # A worker's first lab imports torch between the claim and its first heartbeat;
        # on a loaded machine that can outlast lab_dead_after_s and the run is reaped as
        # "worker_lost" (academy/labruns/queue.py). The second run finds torch imported.
        if attempt or not m.get_by_test_id("stAlert").filter(has_text=t("labs.worker_lost", lang)).count():
            break


@contextlib.contextmanager
def photographed_on_failure(page, artifacts, name: str):
    """Photograph the whole page as ``<name>-FAILED.png`` if the block fails, then fail."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(Exception):
            page.screenshot(path=str(artifacts / f"{name}-FAILED.png"), full_page=True)
        raise


def animate(page, artifacts, algo: str, lang: str = "en") -> None:
    """Play the ring's animation to its last step and check what travels."""
    steps, travels = ALGOS[algo]
    shot = artifacts / f"lab-ring-{algo}.png"
    shot.unlink(missing_ok=True)
    m = main(page)
    alert(page, pattern("labs.done", lang))
    caption = t("labs_naive.animation" if algo == "naive" else "labs.ring.animation", lang)
    see(page, caption)
    chart = m.locator(".js-plotly-plot").first
    chart.wait_for(timeout=WAIT)
    chart.scroll_into_view_if_needed()
    assert chart.locator(".gtitle").text_content() == t("widgets.ring.start", lang)
    chart.locator("g.updatemenu-button").filter(has_text=t("widgets.ring.play", lang)).click()
    last = rf"^{re.escape(t('widgets.ring.step', lang))} {steps}/{steps} "
    # The last step shows, and its transition has ended before the picture.
    page.wait_for_function(
        "([el, last]) => new RegExp(last).test(el.querySelector('.gtitle')?.textContent || '')"
        " && !el._transitioning", arg=[chart.element_handle(), last], timeout=WAIT)
    arrows = chart.locator("g.annotation").all_text_contents()
    assert len(arrows) == RANKS and all(t(travels, lang) in a for a in arrows), arrows
    if algo == "naive":
        assert t("labs_naive.pass_around", lang) in chart.locator(".gtitle").text_content()
    page.screenshot(path=str(shot))
    assert shot.exists()


def reopen(page, name: str, lang: str) -> None:
    """Bring back this visit's run ``name`` of the ring lab from the history below the result."""
    rows = main(page).get_by_role("button", name=re.compile(rf"^#\d+ · {re.escape(t('labs_names.ring', lang))} "))
    (rows.last if name == "ring" else rows.first).click()  # newest first: ring ran first, naive last
    alert(page, pattern(READOUTS[name][2], lang))  # this run's line of what to look for, not the last one's
    wait_app(page)


def read(page, artifacts, name: str, lang: str) -> None:
    """Check the result's readouts on the page in ``lang`` and photograph it at each width."""
    _, must_show, look_key = READOUTS[name]
    m = main(page)
    page.set_viewport_size({"width": 1400, "height": 1000})
    alert(page, pattern("labs.done", lang))
    alert(page, pattern(look_key, lang))
    look = m.get_by_test_id("stAlert").first
    opening = t(look_key, lang, count=3, steps=4)[:6]  # "What t", "看点：环形算", "Waar j"
    assert opening in look.text_content(), look.text_content()  # first, after the icon's name
    m.get_by_text(pattern(must_show, lang)).first.wait_for(timeout=WAIT)
    if name in ("ring", "naive"):  # the step chart's model line: the default's or a benchmark's fit
        line = re.compile(f"{re.escape(t('labs.ring.model_default', lang))}|{pattern('labs.ring.model_fit', lang).pattern}")
        m.locator(".js-plotly-plot g.legend").get_by_text(line).first.wait_for(timeout=WAIT)
    if name == "compression":  # the Pareto plot and its table beside it, the curves below, in this language
        m.get_by_text(t("compression.table_title", lang), exact=True).first.wait_for(timeout=WAIT)
        m.locator(".js-plotly-plot g.legend").get_by_text(t("compression.front", lang), exact=True).first.wait_for(
            timeout=WAIT)
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 1000})
        charts_fitted(page)
        # Streamlit scrolls inside the app, not the document: make the window
        # as tall as the page, so that one picture holds the whole result.
        tall = page.evaluate(HEIGHT)
        page.set_viewport_size({"width": width, "height": min(tall + 40, 16000)})
        charts_fitted(page)
        page.screenshot(path=str(artifacts / f"lab-result-{name}-{lang}-{width}.png"))
    page.set_viewport_size({"width": 1400, "height": 1000})


def timeline(page, artifacts, lang: str) -> None:
    """Check the DDP timeline and the prediction in ``lang`` and photograph them."""
    m = main(page)
    page.set_viewport_size({"width": 1400, "height": 1000})
    m.get_by_role("spinbutton", name=t("labs.predict.field", lang)).wait_for(timeout=WAIT)  # the form's field
    alert(page, pattern("labs.done", lang))
    title = m.get_by_text(pattern("labs.timeline.title", lang)).first
    title.wait_for(timeout=WAIT)
    # The lanes: naive's and DDP's, two ranks each, compute and all-reduce.
    chart = m.locator(".js-plotly-plot").filter(
        has=page.locator(".ytick", has_text=t("labs.timeline.naive", lang))).first
    chart.wait_for(timeout=WAIT)
    ticks = [x for x in chart.locator(".yaxislayer-above .ytick").all_text_contents() if x]
    assert len(ticks) == 8, ticks
    assert sum(tick.startswith(t("labs.timeline.naive", lang)) for tick in ticks) == 4, ticks
    assert sum(tick.startswith("DDP") for tick in ticks) == 4, ticks
    assert chart.locator(".bars .point").count() > 8  # spans, not just lanes
    naive = t("labs.timeline.naive", lang)
    m.get_by_test_id("stMetric").filter(has_text=t("labs.timeline.overlap", lang, name=naive)).first.wait_for()
    m.get_by_text(t("labs.timeline.cap", lang)).first.wait_for()
    m.get_by_role("button", name=t("labs.timeline.download", lang)).wait_for()
    for width, height in ((1400, 1300), (390, 2600)):  # on a phone the figures stack under the lanes
        page.set_viewport_size({"width": width, "height": height})
        charts_fitted(page)
        title.evaluate("e => e.scrollIntoView({block: 'start'})")
        page.wait_for_timeout(200)  # a frame for the scrolled page to be painted
        page.screenshot(path=str(artifacts / f"lab-timeline-{lang}-{width}.png"))
    page.set_viewport_size({"width": 1400, "height": 1000})
    predict = m.get_by_text(pattern("labs.predict.title", lang)).first
    predict.wait_for(timeout=WAIT)
    guess = m.get_by_test_id("stMetric").filter(has_text=t("labs.predict.guess", lang)).first
    assert "9" in guess.inner_text()
    # The run timed dist.all_reduce itself: the model needs no benchmark of this machine (issue #36).
    m.get_by_text(pattern("labs.predict.fit_run", lang)).first.wait_for(timeout=WAIT)
    assert not m.get_by_text(re.compile(re.escape(re.split(r"\{", t("labs.predict.no_fit", lang))[0]))).count()
    model = m.get_by_test_id("stMetric").filter(has_text=t("labs.predict.model", lang)).first
    assert "ms" in model.inner_text() and "—" not in model.inner_text()
    charts_fitted(page)
    predict.evaluate("e => e.scrollIntoView({block: 'start'})")
    page.wait_for_timeout(200)  # a frame for the scrolled page to be painted
    page.screenshot(path=str(artifacts / f"lab-predict-{lang}-1400.png"))
    # The breakdown, above: what overlap hid here, and what the step model says it would hide
    # where communication takes no compute.
    gpu = m.get_by_text(shown_pattern("labs.ddp.overlap_gpu", lang)).first
    gpu.wait_for(timeout=WAIT)
    m.get_by_text(shown_pattern("labs.ddp.overlap", lang)).first.evaluate("e => e.scrollIntoView({block: 'start'})")
    page.wait_for_timeout(200)
    page.screenshot(path=str(artifacts / f"lab-overlap-{lang}-1400.png"))


def sharding(page, artifacts, lang: str) -> None:
    """Check the sharding result in ``lang`` and photograph the ledger, the wire bytes and the played shard map."""
    m = main(page)
    page.set_viewport_size({"width": 1300, "height": 1000})
    see(page, t("sharding.width", lang))  # the form's own field
    alert(page, pattern("labs.done", lang))
    alert(page, t("labs.look.sharding", lang))
    alert(page, t("sharding.check_order", lang, count=2))
    alert(page, pattern("sharding.check_ledger", lang))
    alert(page, pattern("sharding.check_weights", lang))
    see(page, t("sharding.ledger_title", lang, count=2), timeout=WAIT).scroll_into_view_if_needed()
    charts = m.locator(".js-plotly-plot")
    charts.nth(1).wait_for(timeout=WAIT)
    series = t("sharding.series", lang, part=t("sharding.part.optimizer", lang), kind=t("sharding.predicted", lang))
    charts.first.locator("g.legend").get_by_text(series).first.wait_for(timeout=WAIT)  # redrawn in this language
    charts.nth(1).locator("g.legend").get_by_text(t("sharding.sent", lang)).first.wait_for(timeout=WAIT)
    charts_fitted(page)
    page.screenshot(path=str(artifacts / f"lab-sharding-{lang}.png"))
    charts.nth(1).scroll_into_view_if_needed()
    page.wait_for_timeout(200)  # a frame for the scrolled page to be painted
    page.screenshot(path=str(artifacts / f"lab-sharding-{lang}-wire.png"))
    shard_map = charts.nth(2)  # the shard map of DDP: played to its last phase
    shard_map.scroll_into_view_if_needed()
    shard_map.locator("g.updatemenu-button").filter(has_text=t("widgets.ring.play", lang)).click()
    last = t("sharding.phase.step_all", lang)
    page.wait_for_function(LAST_FRAME, arg=[shard_map.element_handle(), last], timeout=WAIT)
    page.screenshot(path=str(artifacts / f"lab-sharding-{lang}-map.png"))


def test_each_ring_algorithm_runs_animates_and_reads_true(page, artifacts):
    """Ring, pipelined, naive: each run once, its animation played; the ring's and the naive
    ring's readouts in English, before any benchmark (the model line is the default's)."""
    speak(page, "en")
    for algo in ALGOS:
        with photographed_on_failure(page, artifacts, f"lab-ring-{algo}"):
            run(page, "ring", "en", algo=algo)
            animate(page, artifacts, algo)
            if algo in READOUTS:
                read(page, artifacts, algo, "en")


def test_the_benchmark_reads_true_and_the_ring_runs_then_draw_its_fit(page, artifacts):
    steps = [("run", "bench", "en"), ("read", "bench", "en"), ("read", "bench", "zh"), ("read", "bench", "nl"),
             # after the benchmark: the ring runs' model lines come from its fit
             ("reopen", "ring", "nl"), ("read", "ring", "nl"), ("reopen", "naive", "nl"), ("read", "naive", "nl"),
             ("reopen", "naive", "zh"), ("read", "naive", "zh"), ("reopen", "ring", "zh"), ("read", "ring", "zh")]
    for what, name, lang in steps:
        with photographed_on_failure(page, artifacts, f"lab-result-{name}-{lang}"):
            speak(page, lang)
            if what == "run":
                run(page, "bench", lang)
            elif what == "reopen":
                reopen(page, name, lang)
            else:
                read(page, artifacts, name, lang)


def test_the_ddp_lab_reads_true_with_each_rank_s_lanes_and_the_prediction(page, artifacts):
    """One DDP run with a predicted step time (9 ms), read in every language: the readouts,
    the timeline's lanes and figures, and the guess beside the step model."""
    speak(page, "en")
    with photographed_on_failure(page, artifacts, "lab-timeline-en"):
        run(page, "ddp", "en", guess="9")
    for lang in ("en", "zh", "nl"):
        with photographed_on_failure(page, artifacts, f"lab-timeline-{lang}"):
            speak(page, lang)
            timeline(page, artifacts, lang)
            read(page, artifacts, "ddp", lang)


def test_the_sharding_lab_runs_and_reads_true_in_each_language(page, artifacts):
    order = ["en", *sorted(set(languages()) - {"en"})]
    for lang in order:
        (artifacts / f"lab-sharding-{lang}.png").unlink(missing_ok=True)
    speak(page, "en")
    with photographed_on_failure(page, artifacts, "lab-sharding-en"):
        run(page, "sharding", "en")
    for lang in order:
        with photographed_on_failure(page, artifacts, f"lab-sharding-{lang}"):
            speak(page, lang)
            sharding(page, artifacts, lang)
    for lang in order:
        assert (artifacts / f"lab-sharding-{lang}.png").exists()


def test_the_compression_lab_reads_in_each_language(page, artifacts):
    """The compression lab with the form's defaults (every strategy, 3 seeds) but its fewest steps
    (50, the slider's Home key: a third of the default run's time), read in nl, zh and en."""
    speak(page, "nl")
    with photographed_on_failure(page, artifacts, "lab-result-compression-nl"):
        pick_lab(page, "compression", "nl")
        steps = main(page).get_by_test_id("stSlider").filter(has_text=t("labs.steps", "nl")).get_by_role("slider")
        steps.focus()
        steps.press("Home")  # an <input type="range">: Home is its minimum, as for a keyboard user
        page.wait_for_function("el => el.value === '50'", arg=steps.element_handle(), timeout=WAIT)
        run(page, "compression", "nl")
    for lang in ("nl", "zh", "en"):
        with photographed_on_failure(page, artifacts, f"lab-result-compression-{lang}"):
            speak(page, lang)
            read(page, artifacts, "compression", lang)
            assert not axe_ours(page), axe_ours(page)  # the plot, both tables, the curves and their chooser (#38)


def test_the_topology_labs_two_targets_read_in_each_language(page, artifacts):
    speak(page, "en")
    with photographed_on_failure(page, artifacts, "lab-result-topology-en"):
        run(page, "topology", "en")
    for lang in ("en", "zh", "nl"):
        with photographed_on_failure(page, artifacts, f"lab-result-topology-{lang}"):
            speak(page, lang)
            read(page, artifacts, "topology", lang)
            legend = main(page).locator(".js-plotly-plot g.legend")
            for key in ("topology.target.h100_node", "topology.target.h100_ib"):
                legend.get_by_text(t(key, lang), exact=True).first.wait_for(timeout=WAIT)


def test_a_slowed_rank_and_a_killed_rank_read_true(page, artifacts):
    """Issue #41: one rank slowed (every rank's timeline, the step against its model, local SGD),
    and a rank killed under torchrun (the work kept, lost and redone; Young/Daly)."""
    speak(page, "en")
    with photographed_on_failure(page, artifacts, "lab-result-straggler-en"):
        run(page, "straggler", "en")
    for lang in ("en", "nl"):
        with photographed_on_failure(page, artifacts, f"lab-result-straggler-{lang}"):
            speak(page, lang)
            read(page, artifacts, "straggler", lang)
            assert not axe_ours(page), axe_ours(page)
    with photographed_on_failure(page, artifacts, "lab-result-failure-nl"):
        run(page, "failure", "nl")
    for lang in ("nl", "zh"):
        with photographed_on_failure(page, artifacts, f"lab-result-failure-{lang}"):
            speak(page, lang)
            read(page, artifacts, "failure", lang)
            main(page).get_by_text(t("failure.steps_title", lang), exact=True).first.wait_for(timeout=WAIT)
            assert not axe_ours(page), axe_ours(page)
