"""The exercises' texts: every message the code can produce exists in every language.

The keys are read from the code itself (``ast``): every ``"key": "..."`` in a
finding or error, every ``failed(check, KEY)`` and ``passed(CHECK)`` (whose
message is ``CHECK_ok``), every ``messages.text(KEY)`` and the router's
``ProtocolError(KEY)``, and the families the code builds from a prefix
(``status_*``, ``sandbox_stopped_*``, ``waiting_*``, ``pattern_*``; the
pattern families' own ``family_*`` names are checked in
``test_exercises_patterns.py``). A key used in an exercise's ``exercise.py`` may live in that
exercise's own ``feedback:``; any other key must be shared
(``feedback.yaml``). Translations keep the English placeholders, the
statements follow each language's glossary, and every exercise has a title,
a summary, a statement and three or more hints in every language.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from academy import content
from labs import exercises
from labs.exercises import messages
from tests.test_terminology import LESSONS, findings, report, rules_from, yaml_texts

ROOT = Path(__file__).resolve().parent.parent
CODE = ROOT / "labs" / "exercises"
CONTENT = content.path(content.EXERCISES)
LANGS = ("en", "zh", "nl")
MINE = ("ring-allreduce", "broadcast")
STOPPED = ("wall_time", "output", "memory", "cpu_time", "processes")  # labs.sandbox.run.Outcome.stopped


def _const(node) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.IfExp):
        return _const(node.body) + _const(node.orelse)
    return []


def keys_in(path: Path) -> set[str]:
    """The message keys one module can put in a report or print."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and node.value.startswith(("waiting_", "pattern_")):
            found.add(node.value)  # the CLI's table from a rank's state, the ring's from a family, to a message
        elif isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values, strict=True):
                if isinstance(k, ast.Constant) and k.value == "key":
                    found.update(_const(v))
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "key" for t in node.targets):
            found.update(_const(node.value))
        elif isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            for keyword in node.keywords:  # Problem(key=...), Finding(key=...): the report's models
                if keyword.arg == "key":
                    found.update(_const(keyword.value))
            if name in ("failed", "stopped") and len(node.args) >= 2:
                found.update(_const(node.args[1]))
            elif name == "passed" and node.args:
                found.update(f"{c}_ok" for c in _const(node.args[0]))
            elif name in ("text", "ProtocolError") and node.args:
                found.update(_const(node.args[0]))
    return found


def used_keys() -> dict[str | None, set[str]]:
    """Keys per exercise (its exercise.py) and, under None, those every exercise can produce."""
    shared: set[str] = {f"status_{s}" for s in ("passed", "failed", "error")}
    shared |= {f"sandbox_stopped_{s}" for s in STOPPED}
    per_exercise: dict[str | None, set[str]] = {}
    for path in sorted(CODE.rglob("*.py")):
        keys = keys_in(path)
        if path.name == "exercise.py":
            per_exercise[path.parent.name.replace("_", "-")] = keys
        elif "drivers" not in path.parts:
            shared |= keys
    per_exercise[None] = shared
    return per_exercise


def test_the_key_walk_finds_what_the_grader_uses():
    """The walk itself: it must see keys of each kind, or the test below would pass on nothing."""
    keys = used_keys()
    assert {"forbidden_call", "guard_refused", "deadlock", "crash", "syntax_error", "missing_function",
            "sandbox_unavailable", "harness_failed", "values_wrong", "returned_new_tensor", "values_ok",
            "waiting_recv", "waiting_running", "waiting_raised", "waiting_other", "frame", "summary",
            "shape_changed", "dtype_ok"} <= keys[None]
    assert {"protocol_size_mismatch", "protocol_any_source", "protocol_unmatched_send", "protocol_device",
            "broadcast_sources_differ", "pattern_shown"} <= keys[None]
    assert {"bytes_whole_buffer", "bytes_total", "bytes_ok", "bytes_none", "pattern_direct",
            "pattern_ok"} <= keys["ring-allreduce"]
    assert {"bytes_src_sent", "bytes_received"} <= keys["broadcast"]


@pytest.mark.parametrize("lang", LANGS)
def test_every_key_used_has_a_message_in_every_language(lang):
    shared = content.load(CONTENT / lang / "feedback.yaml")
    missing = sorted(f"shared: {k}" for k in used_keys()[None] if k not in shared)
    for exercise_id, keys in used_keys().items():
        if exercise_id is None or not (CONTENT / "en" / f"{exercise_id}.yaml").is_file():
            continue  # an exercise whose texts are not written yet is someone else's finding
        path = CONTENT / lang / f"{exercise_id}.yaml"
        own = (content.load(path).get("feedback") or {}) if path.is_file() else {}
        missing += sorted(f"{exercise_id}: {k}" for k in keys if k not in own and k not in shared)
    assert missing == [], f"{lang} lacks messages: {missing}"


@pytest.mark.parametrize("lang", ["zh", "nl"])
def test_translations_keep_the_placeholders(lang):
    files = ["feedback.yaml"] + [f"{e}.yaml" for e in MINE]
    wrong = []
    for name in files:
        en = content.load(CONTENT / "en" / name)
        other = content.load(CONTENT / lang / name)
        en_msgs = en.get("feedback", en) if name != "feedback.yaml" else en
        other_msgs = other.get("feedback", other) if name != "feedback.yaml" else other
        for key, text in en_msgs.items():
            if isinstance(text, str) and key in other_msgs and \
                    messages.placeholders(text) != messages.placeholders(str(other_msgs[key])):
                wrong.append(f"{name}: {key}")
        wrong += [f"{name}: {key} (not in en)" for key in other_msgs if key not in en_msgs]
    assert wrong == []


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("exercise_id", MINE)
def test_each_exercise_has_its_texts(lang, exercise_id):
    texts = content.load(CONTENT / lang / f"{exercise_id}.yaml")
    assert texts["title"].strip() and texts["summary"].strip()
    assert len(texts["hints"]) >= 3
    statement = texts["statement"]
    function = exercises.load(exercise_id).FUNCTION
    assert f"def {function}(" in statement  # the signature
    for call in exercises.load(exercise_id).ALLOWED:  # the calls it may use
        assert f"dist.{call}" in statement, call


@pytest.mark.parametrize("lang", LANGS)
def test_exercise_texts_follow_the_glossary(lang):
    texts = [t for path in sorted((CONTENT / lang).glob("*.yaml")) for t in yaml_texts(path)]
    found = findings(texts, lang, rules_from(LESSONS / lang / "glossary.yaml"))
    assert found == [], report(found)


def test_text_fills_values_as_plain_text_and_falls_back_to_english():
    assert messages.text("crash", "en", rank=1, exception="ValueError", message="**{rank}** <b>") \
        == "Rank 1 raised ValueError: **{rank}** <b>"
    assert messages.text("bytes_total", "zh", exercise="ring-allreduce", sent=1, expected=2, size=3,
                         world_size=4).startswith("所有 rank 合计发送了 1 字节")
    assert "{rank}" in messages.text("crash", "nl")  # a value not given stays visible, nothing fails
    assert messages.text("no_such_key", "zh") == "no_such_key"
    assert messages.languages() == sorted(LANGS)



@pytest.mark.parametrize("lang, to, came_from", [("en", "send to rank 1", "recv from rank 0"),
                                                 ("zh", "发往 rank 1", "来自 rank 0"),
                                                 ("nl", "send naar rank 1", "recv op data van rank 0")])
def test_a_wait_names_its_direction(lang, to, came_from):
    """Review M3: a send waits *to* its peer, a receive *from* it, in every language."""
    send = messages.waiting({"rank": 0, "op": "send", "peer": 1, "bytes": 4}, lang)
    recv = messages.waiting({"rank": 1, "op": "irecv", "peer": 0, "bytes": 0}, lang)
    assert to in send and came_from in recv, (send, recv)
    anyone = messages.waiting({"rank": 1, "op": "recv", "peer": None, "bytes": 0}, lang)
    assert anyone == messages.text("waiting_recv_any", lang, rank=1, op="recv", bytes=0)
    assert messages.waiting({"rank": 2, "op": "barrier", "peer": None, "bytes": 0}, lang) == \
        messages.text("waiting_other", lang, rank=2, op="barrier", bytes=0)


@pytest.mark.parametrize("lang, whole, part", [("en", "4,194,304", "5.3"), ("nl", "4.194.304", "5,3"),
                                               ("zh", "4,194,304", "5.3")])
def test_numbers_in_feedback_are_written_the_readers_way(lang, whole, part):
    """Review m11: nl feedback printed "5.3" beside "5,9 s"; text values stay as they are."""
    shown = messages.text("bytes_whole_buffer", lang, "ring-allreduce", rank=1, sent=4194304, expected=5.3,
                          size=8, world_size=3, whole=16)
    assert whole in shown and part in shown
    assert "1.5" in messages.text("crash", lang, rank=0, exception="ValueError", message="1.5")  # the learner's text


@pytest.mark.parametrize("lang", LANGS)
def test_each_exercise_has_its_own_pass_and_reference_words(lang):
    """Review m12: "values and bytes alike" for an exercise without a byte check."""
    for exercise_id in exercises.EXERCISES:
        passed = messages.template("passed", lang, exercise_id)
        note = messages.template("reference_note", lang, exercise_id)
        own = content.load(CONTENT / lang / f"{exercise_id}.yaml")["feedback"]
        assert own["passed"] == passed and own["reference_note"] == note, exercise_id
    assert messages.template("passed", lang, "average-gradients") != messages.template("passed", lang, "ring-allreduce")


@pytest.mark.parametrize("lang", ["en", "zh", "nl"])
def test_the_command_lines_summary_fills_in_every_count(lang):
    """The summary line had lost its ``total`` ("7 of {total} cases passed") in a merge."""
    from labs.exercises.__main__ import render
    from labs.exercises.report import GradeReport
    from tests import exercisefakes

    last = render(GradeReport.model_validate(exercisefakes.report(passed=False)), lang).splitlines()[-1]
    assert "{" not in last and "2" in last, last


def test_the_exercise_texts_are_read_by_the_one_loader(tmp_path, monkeypatch):
    """``labs.content`` reads them as it reads every catalog (``academy.content`` builds on it):
    ``$CONTENT_DIR`` moves them with the rest, a missing translation is English field by field,
    and a file that is not a mapping of texts is a ``ContentError`` naming it."""
    from academy.settings import get_settings
    from labs import content as loader

    assert content.load is loader.load and content.ContentError is loader.ContentError
    assert messages.root() == CONTENT
    folder = tmp_path / content.EXERCISES
    (folder / "en").mkdir(parents=True)
    (folder / "xx").mkdir()
    (folder / "en" / "feedback.yaml").write_text("passed: Passed.\ncrash: Crashed.\n", encoding="utf-8")
    (folder / "xx" / "feedback.yaml").write_text("passed: Xpassed.\n", encoding="utf-8")
    (folder / "en" / "broadcast.yaml").write_text("title: Broadcast\nsummary: One to all.\n", encoding="utf-8")
    (folder / "xx" / "broadcast.yaml").write_text("title: Xbroadcast\n", encoding="utf-8")
    monkeypatch.setenv("CONTENT_DIR", str(tmp_path))
    get_settings.cache_clear()
    try:
        assert messages.root() == content.path(content.EXERCISES) == folder
        assert messages.languages() == ["en", "xx"]
        assert messages.exercise("broadcast", "xx") == {"title": "Xbroadcast", "summary": "One to all."}
        assert (messages.text("passed", "xx"), messages.text("crash", "xx")) == ("Xpassed.", "Crashed.")
        (folder / "xx" / "ring-allreduce.yaml").write_text("- a list\n", encoding="utf-8")
        with pytest.raises(content.ContentError, match=r"xx/ring-allreduce\.yaml: must be a mapping"):
            messages.exercise("ring-allreduce", "xx")
    finally:
        monkeypatch.delenv("CONTENT_DIR")
        get_settings.cache_clear()


@pytest.mark.parametrize(("lang", "one", "six"), [
    ("en", "1 all-reduce call per step", "6 all-reduce calls per step"),
    ("nl", "1 all-reduce-aanroep per stap", "6 all-reduce-aanroepen per stap"),
    ("zh", "每步 1 次全归约调用", "每步 6 次全归约调用")])
def test_a_message_in_plural_forms_agrees_with_its_count(lang, one, six):
    """"1 all-reduce calls" no more (journey review m9): the form follows ``count`` in the reader's language."""
    for calls, start in ((1, one), (6, six)):
        text = messages.text("bucket_calls_ok", lang, "bucketed-overlap", calls=calls, count=calls, cap=1)
        assert text.startswith(start), text
    check = exercises.load("bucketed-overlap")._calls_finding  # the check passes its count along
    case = {"cap": 1 << 20}
    ranks = [{"result": {"steps": [{"ready": [["w", 12]], "calls": [{"bytes": 12}]}]}}]
    assert check(case, ranks)["values"]["count"] == 1


@pytest.mark.parametrize("lang", LANGS)
def test_a_case_is_labelled_as_its_exercise_sizes_it(lang):
    """A data set's length, a global batch, a tensor: never "37 elements of int64" for a data set
    of 37 samples (journey review m9)."""
    from academy import exercises as catalog
    from academy import i18n
    from labs.exercises.report import CaseReport

    for exercise_id in exercises.EXERCISES:
        case = exercises.load(exercise_id).cases(0)[0]
        entry = CaseReport(id=case["id"], status="passed", world_size=case["world_size"], shape=case["shape"],
                           size=1 if len(case["shape"]) == 1 and case["shape"][0] == 1 else case["shape"][0],
                           dtype=case["dtype"], src=case.get("src"))
        label = catalog.case_label(exercise_id, entry, lang)
        kind = getattr(exercises.load(exercise_id), "CASE_SIZE", "tensor")
        if kind == "batch":
            samples, features = case["shape"]
            assert label == i18n.t("exercises.case_batch", lang, id=case["id"], world=case["world_size"],
                                   count=samples, features=features, per_rank=samples // case["world_size"])
        elif kind == "dataset":
            assert label == i18n.t("exercises.case_dataset", lang, id=case["id"], world=case["world_size"],
                                   count=case["shape"][0])
        else:
            assert label.startswith(f"{case['id']}")
            assert kind == "tensor" and exercise_id in ("ring-allreduce", "broadcast", "hierarchical-allreduce")
    assert exercises.load("shard-indices").CASE_SIZE == "dataset"
