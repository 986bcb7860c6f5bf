"""Questions built from a learner's own lab runs (issue #42): the templates and their checks,
the figures of each lab's real report, the questions a run gives, what the browser sees
before an answer, the feedback with the learner's numbers, and the audit that derives
every stored question again from its run."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from sqlmodel import select

from academy import lessons
from academy.labruns.kinds import LAB
from academy.models import LabRun, RunQuestion
from labs import context
from quizzes import own
from quizzes.figures import FIGURES, figures
from quizzes.numbers import InvalidResponse, QuestionUnavailable
from quizzes.templates import build, load_templates, option_values, templates_dir, values_problems
from tests.runquestions import LABS, learner_with_runs, result

LANGS = ("en", "zh", "nl")


# ------------------------------------------------------------------ templates


def test_the_course_templates_pass_the_checks_of_the_bank(capsys):
    from quizzes.__main__ import check

    templates = load_templates()
    assert templates.problems == ()
    assert templates.languages == tuple(lessons.languages())
    assert set(FIGURES) == set(context.LABS)  # every lab's runs ask questions (the Review page says so)
    for lab in FIGURES:
        assert len(templates.of(lab)) >= 2, lab
    assert check() == 0
    assert f"templates over lab runs: {len(templates.templates)} usable" in capsys.readouterr().out


def _templates_with(tmp_path: Path, old: str, new: str):
    """The course's templates with one edit in ring.yaml."""
    for path in templates_dir().glob("*.yaml"):
        text = path.read_text(encoding="utf-8")
        if path.name == "ring.yaml":
            assert old in text, old
            text = text.replace(old, new, 1)
        (tmp_path / path.name).write_text(text, encoding="utf-8")
    return load_templates(tmp_path)


@pytest.mark.parametrize(("old", "new", "expected", "kept"), [
    # On 2 ranks busbw equals algbw: an example there builds no question, and says why.
    ("- {n: 3, S: 1.05, t: 21.6}   # this", "- {n: 2, S: 1.05, t: 21.6}   # this",
     "ring.yaml: ring-allreduce-your-busbw: examples: example 1 builds no question for any draw "
     "(first draw: mistake 'algbw for busbw'", False),
    ('answer: "S / t * 2 * (n - 1) / n"', 'answer: "S / t * 2 * (n - 1) / n * k"',
     "ring.yaml: ring-allreduce-your-busbw: answer uses unknown names k", False),
    ("figures: [n, S, t]", "figures: [n, S, t, steps]", "the ring lab has no figure(s) steps", False),
    ("= {answer} GB/s. That", "= {answer} GB/s in {steps}. That", "explain.en: unknown placeholders ['steps']", True),
    ("took {t} ms (the median", "took a while (the median", "text.en: does not show ['t']", True),
    ("  see: ring-allreduce\n", "  see: ring-all-reduce\n", "see: unknown section(s) ring-all-reduce", True),
    ('    nl: "Jouw ring all-reduce van {S} MB over {n} ranks duurde', '    xx: "Jouw ring all-reduce van {S} MB over {n} ranks duurde',
     "unknown language(s) xx", False),
    # A missing translation: named, and the template stays (the English stands in), as in the bank.
    ('\n    nl: "Jouw ring all-reduce van {S} MB over {n} ranks duurde', '\n    # nl: "Jouw ring all-reduce',
     "ring-allreduce-your-busbw: text: lacks nl", True),
    ("lab: ring\n  figures: [n, S, t]", "lab: bench\n  figures: [n, a, B]", "example 1 must give exactly the figures n, a, B", False),
])
def test_a_broken_template_is_found_and_named(tmp_path, old, new, expected, kept):
    templates = _templates_with(tmp_path, old, new)
    assert any(expected in p for p in templates.problems), templates.problems
    assert ("ring-allreduce-your-busbw" in templates.templates) is kept


def test_a_question_is_asked_only_where_its_options_tell_the_ideas_apart():
    busbw = load_templates().templates["ring-allreduce-your-busbw"]
    assert values_problems(busbw, {"n": 3, "S": 1.05, "t": 21.6}, LANGS) == []
    # 2 ranks: 2(n-1)/n = 1, busbw is algbw and the factor's inverse too.
    two = values_problems(busbw, {"n": 2, "S": 1.05, "t": 21.6}, LANGS)
    assert any("'algbw for busbw'" in p for p in two) and build(busbw, {"n": 2, "S": 1.05, "t": 21.6}, seed="x") is None
    exposed = load_templates().templates["ddp-your-exposed-communication"]
    assert any("within 5%" in p for p in values_problems(exposed, {"Y": 50, "C": 8}, LANGS))  # hidden = exposed


# -------------------------------------------------------------------- figures


def test_the_figures_of_each_labs_real_report():
    assert figures("ring", result("ring")) == {"n": 3, "S": 1.05, "t": 21.6, "bw": 0.0646}
    assert figures("bench", result("bench")) == {"n": 3, "a": 564.0, "B": 0.7}
    assert figures("ddp", result("ddp")) == {"Y": 44.4, "C": 7.85, "k": 2, "r1": 31400.0, "rk": 11700.0}
    assert figures("sharding", result("sharding")) == {"n": 2, "N": 1.18, "P": 4.73, "w": 4.73, "g": 4.73,
                                                        "o": 9.46, "z2": 11.8}
    # Bytes handed to the collectives stay whole: they are counted, not timed.
    assert figures("compression", result("compression")) == {"D": 27688, "K": 560, "p1": 1744, "p2": 2936}
    assert figures("topology", result("topology")) == {"k": 2, "S": 4.19, "f": 6.29, "h": 4.19}
    assert figures("straggler", result("straggler")) == {"n": 2, "o": 4.73, "a": 1.61, "H": 4, "oL": 9.52,
                                                          "aL": 10.7}
    assert figures("failure", result("failure")) == {"E": 10, "s": 6.08, "d": 2.61, "R": 4.0}
    for lab in LABS:
        assert set(figures(lab, result(lab))) == set(FIGURES[lab][1]), lab
        assert figures(lab, LAB.slim(result(lab))) == figures(lab, result(lab))  # an old run's report


def test_a_run_without_the_figures_gives_none_of_them():
    naive = result("ring")
    naive["summary"]["algo"] = "naive"  # sends (n-1)·S: none of the ring's templates fits
    assert figures("ring", naive) == {}
    no_fit = result("bench")
    no_fit["summary"]["fit"] = {"all_reduce": None}
    assert figures("bench", no_fit) == {}
    no_timeline = result("ddp")
    del no_timeline["summary"]["sections"]["timeline"]
    assert set(figures("ddp", no_timeline)) == {"k", "r1", "rk"}
    no_topk = result("compression")
    for name in ("topk", "topk_ef"):
        del no_topk["summary"]["strategies"][name]
    assert set(figures("compression", no_topk)) == {"D", "p1", "p2"}
    # A 6 x 64 matrix is compressed at rank 2, (6 + 64) x 2 x 2 < 6 x 64, and sent whole at rank
    # 3, (6 + 64) x 3 x 2 > 6 x 64: rank 3's bytes would not follow from rank 1's and rank 2's.
    small = result("compression")
    small["summary"]["shapes"] = [*small["summary"]["shapes"], [6, 64]]
    assert set(figures("compression", small)) == {"D", "K"}
    one_node = result("topology")
    one_node["summary"].update(nodes=1, per_node=4)
    assert figures("topology", one_node) == {}
    uncounted = result("topology")  # the loopback fabric: no link, no counters
    for row in uncounted["summary"]["rows"]:
        row["payload_bytes"] = None
    assert figures("topology", uncounted) == {}
    no_local = result("straggler")
    del no_local["summary"]["variants"]["local_sgd"]
    assert set(figures("straggler", no_local)) == {"n", "o", "a"}
    never_killed = result("failure")
    never_killed["summary"].update(restarts=0, restart=[], restart_cost_s=0.0)
    assert set(figures("failure", never_killed)) == {"E", "s", "d"}
    never_saved = result("failure")
    never_saved["summary"].update(save_s=None, delta_s=0.0, tau_opt_s=None)
    assert set(figures("failure", never_saved)) == {"E", "s", "R"}
    assert figures("ring", {"summary": {"world_size": "two"}}) == {}  # not the lab's report
    assert figures("exercise", result("ring")) == {}  # a lab without templates


# ---------------------------------------------------------- questions of a run


def test_a_run_gives_its_questions_once_and_the_same_ones_every_time(session):
    learner_id, runs = learner_with_runs(session, LABS)
    templates = load_templates()
    for lab, run_id in runs.items():
        run = session.get(LabRun, run_id)
        made = own.add_for_run(session=session, run=run)
        assert sorted(q.template for q in made) == sorted(t.id for t in templates.of(lab)), lab
        assert own.add_for_run(session=session, run=run) == []
        for item in made:
            template = templates.templates[item.template]
            assert item.learner_id == learner_id and item.run_id == run_id and item.lab == lab
            assert item.params == build(template, figures(lab, run.result), seed=own.seed_of(run_id, template.id))
            assert set(item.params) == template.names
    # Not a learner's finished run: no questions.
    other = LabRun(learner_id=learner_id, lab="ring", status="failed", result=result("ring"))
    guest = LabRun(learner_id=None, lab="ring", status="done", result=result("ring"))
    session.add_all([other, guest])
    session.commit()
    assert own.add_for_run(session=session, run=other) == [] and own.add_for_run(session=session, run=guest) == []


def _items(session, labs=LABS):
    learner_id, runs = learner_with_runs(session, labs)
    for run_id in runs.values():
        own.add_for_run(session=session, run=session.get(LabRun, run_id))
    return list(session.exec(select(RunQuestion).where(RunQuestion.learner_id == learner_id)))


def test_no_answer_reaches_the_browser_before_the_learner_answers(session):
    for item in _items(session):
        template = load_templates().templates[item.template]
        positions = set()
        for seed in range(12):
            plan = own.plan(item, seed=seed)
            public = own.public_question(item, plan, "en")
            shown = dataclasses.asdict(public)
            assert set(shown) == {"question_id", "topic", "type", "text", "options", "items", "unit"}
            assert [key for key, _ in public.options] == list("abcd"[: 1 + len(template.mistakes)])
            assert all(re.fullmatch(r"[\d.,\u202f e-]+ \S+", text) for _, text in public.options), public.options
            positions.add(plan["options"].index(0))
        assert len(positions) > 1, item.template  # the answer is not always in one place


@pytest.mark.parametrize("lang", LANGS)
def test_the_feedback_shows_the_working_with_the_learners_numbers(session, lang):
    for item in _items(session):
        template = load_templates().templates[item.template]
        plan = own.plan(item, seed=3)
        public = own.public_question(item, plan, lang)
        assert "{" not in public.text
        right_key = "abcd"[plan["options"].index(0)]
        wrong_key = next(k for k, _ in public.options if k != right_key)
        good, bad = (own.grade(item, plan, key, lang) for key in (right_key, wrong_key))
        assert good.correct and not bad.correct and good.credit == 1 and bad.credit == 0
        assert good.correct_answer == bad.correct_answer == [dict(public.options)[right_key]]
        assert bad.given == [dict(public.options)[wrong_key]]
        exact = option_values(template, item.params)[0]
        assert good.expected == pytest.approx(exact)
        for option in good.explanations:
            assert "{" not in option.explain and option.see == (template.topic,)
            assert f"lang={lang}" in option.explain  # ends in the linked "See <section>."
            assert "。 " not in option.explain  # no space after full-width punctuation
        working = next(o.explain for o in good.explanations if o.correct)
        assert dict(public.options)[right_key].split(" ")[0] in working  # the answer, as the option shows it
    one = _items(session, ("ring",))[0]
    if lang == "nl":  # the learner's 1.05 MB as a Dutch reader writes it
        assert "1,05 MB" in own.public_question(one, own.plan(one, seed=1), "nl").text


def test_an_answer_that_does_not_fit_is_refused(session):
    item, other = _items(session, ("ring",))[:2]
    plan = own.plan(item, seed=1)
    for response in ("z", ["a"], 3):
        with pytest.raises(InvalidResponse):
            own.grade(item, plan, response, "en")
    with pytest.raises(QuestionUnavailable):
        own.grade(other, plan, "a", "en")  # a plan of another question


# ---------------------------------------------------------------------- audit


def test_the_audit_derives_every_question_again_from_its_run(session):
    items = _items(session)
    assert own.audit(session=session) == (len(items), [])
    # An old run keeps its summary only (the queue prunes its report): still derivable.
    for run in session.exec(select(LabRun)).all():
        run.result = LAB.slim(run.result)
        session.add(run)
    session.commit()
    assert own.audit(session=session, batch=3) == (len(items), [])

    tampered = items[0]
    tampered.params = {**tampered.params, "n": tampered.params["n"] + 1}
    session.add(tampered)
    sharding = session.exec(select(LabRun).where(LabRun.lab == "sharding")).first()
    summary = sharding.result["summary"]
    # Twice the weights' bytes: P and N change, so both sharding questions no longer follow.
    sharding.result = {**sharding.result, "summary": {**summary, "model": {"bytes": 2 * summary["model"]["bytes"]}}}
    session.add(sharding)
    session.commit()
    checked, problems = own.audit(session=session)
    assert checked == len(items)
    assert any(f"run question {tampered.id} " in p and "the question holds" in p for p in problems), problems
    assert sum(f"(run {sharding.id}," in p for p in problems) == len([i for i in items if i.lab == "sharding"])
    assert len(problems) == 1 + len([i for i in items if i.lab == "sharding"])
