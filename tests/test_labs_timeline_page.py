"""The DDP lab's timeline on the Labs page (issue #25): swim lanes per rank and
thread, naive above DDP on one clock, the overlap and exposed figures beside
them, the bucket-cap slider choosing DDP's timeline, and the trace download,
in every language. A real run feeds the page; no timing is asserted.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from academy import i18n
from app import charts
from app import timeline as lanes
from tests.test_labs_readouts import shown, store, texts

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def result() -> dict:
    proc = subprocess.run([sys.executable, "-m", "labs", "ddp", "--world-size", "2", "--sections", "timeline",
                           "--bucket-caps-mb", "0.01", "25", "--json"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def lane_chart(at) -> dict:
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    return next(s for s in specs if any(tr.get("base") for tr in s["data"]))


@pytest.mark.usefixtures("app_db")
@pytest.mark.parametrize("lang", ["en", "zh", "nl"])
def test_the_page_draws_each_rank_s_lanes_and_the_figures_beside_them(result, lang):
    tl = result["summary"]["sections"]["timeline"]
    at = shown(store(result), lang)
    assert i18n.t("labs.timeline.title", lang, count=tl["steps"]) in [m.value.strip("*") for m in at.markdown]
    assert any(i18n.t("labs.timeline.look", lang) in m.value for m in at.markdown)
    spec = lane_chart(at)
    lanes_drawn = spec["layout"]["yaxis"]["categoryarray"]
    assert len(lanes_drawn) == 2 * 2 * 2  # naive and DDP, 2 ranks, compute and comm
    naive, ddp = i18n.t("labs.timeline.naive", lang), i18n.t("labs.timeline.ddp", lang, cap="0,05" if lang == "nl"
                                                              else "0.05")
    assert lanes_drawn[0].startswith(naive) and lanes_drawn[-1].startswith(ddp)
    drawn = sum(len(tr["x"]) for tr in spec["data"])
    spans = sum(len(r["spans"]) for name in ("naive", "ddp") for r in tl["variants"][name]["ranks"])
    assert drawn == spans
    metrics = {m.label: m.value for m in at.metric}
    for title in (naive, ddp):
        assert i18n.t("labs.timeline.overlap", lang, name=title) in metrics
        assert i18n.t("labs.timeline.exposed", lang, name=title) in metrics
    assert metrics[i18n.t("labs.timeline.overlap", lang, name=naive)] in ("0%", "0 %")
    assert any(b.label == i18n.t("labs.timeline.download", lang) for b in at.get("download_button"))
    # The slider picks DDP's bucket cap: at 25 MB the lower lanes are that run's.
    slider = next(s for s in at.select_slider if s.label == i18n.t("labs.timeline.cap", lang))
    assert slider.value == 0.05 and list(slider.options) == [lanes_format(c, lang) for c in (0.01, 0.05, 25.0)]
    slider.set_value(25.0).run()
    after = lane_chart(at)["layout"]["yaxis"]["categoryarray"]
    assert after[-1].startswith(i18n.t("labs.timeline.ddp", lang, cap="25")) and after[0] == lanes_drawn[0]
    assert not at.exception
    assert any(i18n.t("labs.timeline.idle", lang, idle="", count=1, hidden=0, batch=0, cpus=0)[:8] in x
               for x in texts(at))


def lanes_format(cap: float, lang: str) -> str:
    return i18n.format_number(cap, lang, "g") + " MB"


def test_the_lanes_use_the_palette_and_carry_their_numbers_as_a_table(result):
    variants = result["summary"]["sections"]["timeline"]["variants"]
    labels = {k: k for k in ("rank", "compute", "comm", "ms", "span", "start", "end", "forward", "backward",
                             "optimizer")}
    fig = lanes.timeline_figure([("naive", variants["naive"]), ("ddp", variants["ddp"])], labels)
    text = json.dumps(fig.to_plotly_json())
    for colour in {c.lower() for c in re.findall(r"#[0-9a-fA-F]{6}", text)}:
        assert colour in charts.palette(), colour
    bars = {tr.name: tr.marker.color for tr in fig.data}
    assert bars["comm"] == charts.COMMUNICATION and bars["backward"] == charts.COMPUTE
    table = charts.table(fig)
    assert table["columns"][1:] == ["span", "start", "end"]
    assert len(table["rows"]) == sum(len(r["spans"]) for name in ("naive", "ddp")
                                     for r in variants[name]["ranks"])
