"""What we tell learners and verifiers about grading is what the grader does (issue #36, M2).

The exercises' ranks are real processes whose ``torch.distributed`` is a stand-in: every
message goes through the harness's router, which forwards it and counts its bytes, and the
expected values come from the harness's own plain torch (``labs/exercises/runtime/``). No
rank holds a gloo process group, no byte crosses a network connection, and no result is
compared with a PyTorch collective. This test reads every learner-visible text (``content/``,
every language) and the operators' documentation (README, ``docs/``) and fails on a sentence
that names one of those mechanisms as ours. The labs do run on gloo: saying so is fine, and
only these claims about the grading are caught.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent

# Each: a claim about the grading that is not true, as it was or could be written, per language.
NOT_OUR_GRADER = {
    "ranks on gloo": [
        r"real gloo process", r"gloo socket", r"真实 ?gloo ?进程", r"echte gloo-process",
    ],
    "bytes on a network": [
        r"rank'?s network connection", r"network connections of each rank", r"checked on the network",
        r"framing gloo adds", r"gloo adds to each message",
        r"rank 的网络连接", r"在网络上检查", r"gloo 给每条消息加的帧头",
        r"netwerkverbinding(en)? van (elke )?rank", r"op het netwerk gecontroleerd", r"berichtkoppen na die gloo",
    ],
    "a PyTorch collective as the yardstick": [
        r"against (the )?(pytorch's )?(own |built-in )+collective", r"checked against pytorch",
        r"match(es)? the built-in collective", r"(equal to|those of|against) `?dist\.(all_reduce|broadcast)`?",
        r"与\s*PyTorch\s*(内置|自带)的集合通信", r"内置集合通信的结果", r"调用 `dist\.(all_reduce|broadcast)` 的结果",
        r"ingebouwde collectieve", r"collectieve operaties van pytorch zelf",
        r"(gelijk aan|die van) `dist\.(all_reduce|broadcast)`",
    ],
}
PATTERNS = [(what, re.compile(p, re.IGNORECASE)) for what, ps in NOT_OUR_GRADER.items() for p in ps]

# Sentences the exercises, the Exercises page and the badge said before issue #36: each must be caught.
OLD_CLAIMS = [
    "Your function runs on real gloo processes in a sandbox and is checked against PyTorch's own collective "
    "operations on hidden cases",
    "the grader counts, outside your processes, the bytes that cross each rank's network connections",
    "a ring's, give or take the framing gloo adds to each message",
    "- **values**: equal to `dist.all_reduce` on the same inputs, up to float rounding",
    "- **values**: exactly those of `dist.broadcast` on the same inputs;",
    "Values match the built-in collective.",
    "run on several processes and checked against PyTorch's built-in collective operations on hidden test cases",
    "grades the learner's file on real processes against the built-in collective",
    "你的函数在沙箱里的真实 gloo 进程上运行，并在隐藏的测试用例上与 PyTorch 自带的集合通信操作逐一比对",
    "另有两个较大的用例（约一千个元素）还要在网络上检查：评分程序在你的进程之外统计每个 rank 的网络连接上传输的字节数",
    "与对相同输入调用 `dist.all_reduce` 的结果一致", "数值与内置集合通信的结果一致。",
    "Je functie draait op echte gloo-processen in een sandbox en wordt op verborgen testgevallen vergeleken met de "
    "collectieve operaties van PyTorch zelf",
    "de bytes die over de netwerkverbindingen van elke rank gaan", "op de berichtkoppen na die gloo aan elk bericht",
    "gelijk aan `dist.all_reduce` op dezelfde invoer", "De waarden komen overeen met de ingebouwde collectieve operatie.",
]
# What is true may still name gloo or the network.
TRUE_SENTENCES = [
    "its `torch.distributed` is a stand-in, not gloo: it has no process group and no socket",
    "gloo may let a small blocking send return early, because the operating system buffers it on the socket",
    "Run real PyTorch code: several processes on this machine talk over gloo (NCCL when there are GPUs)",
    "你的网络连接尝试次数过多，请等几分钟后再试。", "Averaging the gradients after backward leaves the network idle",
    "the built-in collectives, DistributedDataParallel",
    "PyTorch 自带的集合通信后端，主要用于 CPU 训练",
]


def claims(text: str) -> list[str]:
    return [f"{what}: {m.group(0)!r}" for what, pattern in PATTERNS for m in pattern.finditer(text)]


def strings(value, key: str = "") -> list[tuple[str, str]]:
    """(dotted key, text) of every string in a YAML document."""
    if isinstance(value, str):
        return [(key, value)]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in strings(v, f"{key}.{k}" if key else str(k))]
    if isinstance(value, list):
        return [s for i, v in enumerate(value) for s in strings(v, f"{key}.{i}")]
    return []


# A passage about the exercises or their grading, in any of the languages. The labs really do
# run on gloo and check the hand-written ring against dist.all_reduce: their texts are not read.
ABOUT_GRADING = re.compile(r"exercise|grader|grading|graded|练习|评分|oefening|beoordeel", re.IGNORECASE)


@functools.cache
def learner_texts() -> dict[str, str]:
    """Per file, every passage a learner or a verifier reads about the exercises and their
    grading: all of the exercises' texts, the badge's and the PDF's; of the UI catalogs, the
    lessons, the README and docs/, each string or paragraph about the exercises."""
    found = {}
    for path in sorted((ROOT / "content").rglob("*")):
        rel = str(path.relative_to(ROOT))
        whole = rel.startswith(("content/exercises/", "content/credentials/", "content/certificates/"))
        if path.suffix in (".yaml", ".yml"):
            passages = [text for key, text in strings(yaml.safe_load(path.read_text("utf-8")))
                        if whole or "exercise" in key or ABOUT_GRADING.search(text)]
        elif path.suffix == ".md":
            passages = [p for p in path.read_text("utf-8").split("\n\n") if whole or ABOUT_GRADING.search(p)]
        else:
            continue
        found[rel] = "\n\n".join(passages)
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        if path.is_file():
            paragraphs = path.read_text("utf-8").split("\n\n")
            found[str(path.relative_to(ROOT))] = "\n\n".join(p for p in paragraphs if ABOUT_GRADING.search(p))
    return found


def test_the_check_knows_the_old_claims_and_lets_the_truth_pass():
    assert [s for s in OLD_CLAIMS if not claims(s)] == []
    assert {s: claims(s) for s in TRUE_SENTENCES if claims(s)} == {}


def test_it_reads_the_exercises_the_exercises_page_and_the_badge():
    texts = learner_texts()
    for lang in ("en", "zh", "nl"):
        assert f"content/exercises/{lang}/ring-allreduce.yaml" in texts
        assert f"content/credentials/{lang}.yaml" in texts
        assert f"content/certificates/{lang}.yaml" in texts
        assert "router" in texts[f"content/i18n/{lang}.yaml"].lower() or "路由器" in texts[f"content/i18n/{lang}.yaml"]
    assert any("How grading works" in texts[p] for p in texts if not p.startswith("content/"))


@pytest.mark.parametrize("path", sorted(learner_texts()))
def test_no_text_names_a_grading_mechanism_the_grader_does_not_use(path):
    assert claims(learner_texts()[path]) == [], path
