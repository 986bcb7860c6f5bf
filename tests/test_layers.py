"""The import graph is layered (issue #14, STYLE.md 13): pages on top, then
``quizzes``/``certificates``, then the core (``academy``) and ``labs``.

A static check over the source with ``ast`` lists every import edge between
our modules (also imports inside functions, which run later but still bind
the layers) and fails on an edge that runs upward, on any import of ``app``
or ``tests`` from outside them, and on a cycle, between packages or between
modules. A fresh interpreter then proves that the plain modules load without
the Streamlit app.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Higher imports lower (or its own layer); never the other way round.
LAYERS = {
    "tests": 4,
    "app": 3, "benchmarks": 3,
    "certificates": 2, "quizzes": 2,
    "academy": 1, "labs": 1,
}
# Not even their own layer may import these (``app`` is only run, by Streamlit,
# and imported by the tests above it).
TOPS = ("app", "tests")


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            if "versions" in path.parts and "migrations" in path.parts:
                continue  # Alembic revisions import only alembic and sqlalchemy
            found[module_name(path, root)] = path
    return found


def import_edges(root: Path, packages: tuple[str, ...]) -> set[tuple[str, str]]:
    """(importer, imported) for every import between our modules; an import of
    a package's name resolves to its submodule where one exists."""
    known = modules(root, packages)
    edges = set()

    def resolve(name: str) -> str | None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    for name, path in known.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = name.split(".")
                    anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                    base = ".".join(anchor + ([base] if base else []))
                # `from pkg import mod` is an edge to pkg.mod; `from pkg import name` to pkg
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
            for target in targets:
                if target.split(".")[0] not in packages:
                    continue
                resolved = resolve(target)
                if resolved and resolved != name:
                    edges.add((name, resolved))
    return edges


def problems(edges: set[tuple[str, str]], layers: dict[str, int]) -> list[str]:
    found = []
    for src, dst in sorted(edges):
        top_src, top_dst = src.split(".")[0], dst.split(".")[0]
        if top_src == top_dst:
            continue
        if top_dst in TOPS and layers[top_src] <= layers[top_dst]:
            found.append(f"{src} imports {dst}: nothing beside or below {top_dst} may import it")
        elif layers[top_dst] > layers[top_src]:
            found.append(f"{src} imports {dst}: upward ({top_src} is below {top_dst})")
    packages = {(a.split(".")[0], b.split(".")[0]) for a, b in edges if a.split(".")[0] != b.split(".")[0]}
    for graph, what in ((edges, "modules"), (packages, "packages")):
        found += [f"import cycle among {what}: {', '.join(c)}" for c in cycles(graph)]
    return found


def cycles(edges: set[tuple[str, str]]) -> list[list[str]]:
    """The strongly connected components with more than one node, sorted: each
    holds at least one cycle through all its members."""
    graph: dict[str, list[str]] = {}
    for a, b in sorted(edges):
        graph.setdefault(a, []).append(b)
        graph.setdefault(b, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan; the graph is small, recursion is fine
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))
    for v in graph:
        if v not in index:
            visit(v)
    return components


def test_the_source_is_layered_without_cycles():
    edges = import_edges(ROOT, tuple(LAYERS))
    # The check sees the real graph: these edges exist today.
    assert ("app.ui", "academy.i18n") in edges
    assert ("certificates.store", "quizzes.store") in edges
    assert problems(edges, LAYERS) == []


def drawn_edges(drawing: int = 0) -> set[tuple[str, str]]:
    """The arrows of a drawing in docs/contributors/architecture.md (a mermaid flowchart):
    the first draws the packages, the second the parts of ``labs``."""
    page = (ROOT / "docs" / "contributors" / "architecture.md").read_text(encoding="utf-8")
    block = page.split("```mermaid")[1 + drawing].split("```", 1)[0]
    return {(a, b) for a, b in re.findall(r"^\s*(\w+)\s*-->\s*(\w+)\s*$", block, re.MULTILINE)}


def test_the_docs_draw_every_package_edge():
    """The architecture page's drawing shows exactly the package edges the source has."""
    drawn = drawn_edges()
    edges = import_edges(ROOT, tuple(p for p in LAYERS if p != "tests"))
    real = {(a.split(".")[0], b.split(".")[0]) for a, b in edges} - {(p, p) for p in LAYERS}
    assert drawn == real, f"missing in the drawing: {sorted(real - drawn)}; not real: {sorted(drawn - real)}"


def labs_part(module: str) -> str:
    """A ``labs`` module's part: a lab's folder, ``exercises``, ``sandbox``, or the machinery at its root."""
    from labs.context import LABS

    part = module.split(".")[1] if module.count(".") else ""
    return part if part in (*LABS, "exercises", "sandbox") else "machinery"


def test_the_docs_draw_every_edge_inside_labs():
    """One folder per lab, the sandbox apart, the run machinery at the root: the second drawing
    shows exactly the imports between those parts, so a lab that reaches into another, or
    machinery that imports a lab, shows up here."""
    edges = {(labs_part(a), labs_part(b)) for a, b in import_edges(ROOT, ("labs",))}
    real = {(a, b) for a, b in edges if a != b}
    drawn = drawn_edges(1)
    assert drawn == real, f"missing in the drawing: {sorted(real - drawn)}; not real: {sorted(drawn - real)}"
    assert not {b for a, b in real if a == "machinery"}, "the machinery finds labs through LABS only"


def test_no_module_is_over_600_lines():
    """Issue #23: a module that does one job fits in 600 lines (tests and migrations aside)."""
    long = {str(p.relative_to(ROOT)): n for pkg in LAYERS if pkg != "tests"
            for p in (ROOT / pkg).rglob("*.py") if "migrations" not in p.parts
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 600}
    assert long == {}


def test_every_top_level_package_has_a_layer():
    packages = {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file() or p.name == "academy"}
    assert packages <= set(LAYERS), f"give these a layer in LAYERS: {sorted(packages - set(LAYERS))}"


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")


def test_the_check_catches_an_upward_edge_an_import_of_app_and_cycles(tmp_path):
    write(tmp_path, {
        "academy/__init__.py": "",
        "academy/core.py": "def f():\n    from quizzes import bank\n",  # upward, inside a function
        "quizzes/__init__.py": "",
        "quizzes/bank.py": "from .engine import grade\n",  # relative import
        "quizzes/store.py": "from academy.core import f\n",  # with academy.core: a package cycle
        "quizzes/engine.py": "import quizzes.bank\n",  # bank <-> engine
        "certificates/__init__.py": "",
        "certificates/store.py": "from app.ui import t\n",  # nothing imports app
        "app/__init__.py": "",
        "app/ui.py": "from academy import core\n",
        "benchmarks/__init__.py": "",
        "benchmarks/load.py": "from app import ui\n",  # same layer, still not allowed
        "tests/__init__.py": "",
        "tests/test_ui.py": "from app import ui\n",  # the tests may
    })
    packages = ("app", "benchmarks", "tests", "certificates", "quizzes", "academy")
    found = problems(import_edges(tmp_path, packages), LAYERS)
    assert "benchmarks.load imports app.ui: nothing beside or below app may import it" in found
    assert not any(p.startswith("tests.") for p in found)
    assert "academy.core imports quizzes.bank: upward (academy is below quizzes)" in found
    assert "certificates.store imports app.ui: nothing beside or below app may import it" in found
    assert "import cycle among modules: quizzes.bank, quizzes.engine" in found
    assert "import cycle among packages: academy, quizzes" in found


@pytest.mark.slow
def test_the_plain_modules_load_without_the_app():
    code = ("import quizzes.store, certificates.store, labs.launch, labs.ring.lab; import sys; "
            "print(sorted(m for m in sys.modules if m == 'app' or m.startswith('app.')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_the_platform_path_imports_no_torch():
    """Issue #23: certificates, quizzes, the queue, the worker and the admin commands start
    without PyTorch (seconds of CPU each); only the processes that run a lab load it."""
    code = ("import certificates.store, certificates.__main__, quizzes.store, academy.labruns.queue, "
            "academy.worker, academy.admin, academy.exercises, sys; "
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_no_page_imports_torch(tmp_path):
    """Issue #23, #37: the web process loads no PyTorch, on any page. The Labs page names
    each lab, builds its form and checks a request without it (each lab's ``lab`` module
    is torch-free, its rank code is not); then every page under ``app/views`` is drawn for
    a signed-in administrator, the Labs page with a finished ring run (its animation) and
    the Exercises page with a graded ring submission (its ring, sized from the report)."""
    code = """
import sys
from pathlib import Path
from academy.labruns import pages as labruns
from app import labviews  # the page's helpers, imported as the page imports them
from labs.context import LABS, load_lab, world_size_default
from labs.params import Run, offered

for lab in LABS:
    offered(load_lab(lab).Params), offered(Run), world_size_default(lab)
    assert labruns.offers(lab)
    assert labruns.validate(lab, {}).run.world_size >= 1
    assert labruns.validate(lab, {"world_size": 2, "backend": "gloo"}).run.world_size == 2
    assert labruns.validate(lab, {"world_size": 2, "backend": "auto"}).run.backend == "auto"
from tests.apptest import open_page  # the pages themselves
for lab in LABS:
    at = open_page("labs", lab=lab)
    assert not at.exception and at.get("form"), lab

from academy.exercises import LAB
from tests.exercisefakes import report
from tests.factories import finished_run, learner
from tests.test_lab_reports import OLD_RING

me = learner(display_name="Admin", admin=True)
ring = finished_run("ring", OLD_RING, learner_id=me, machine={"cpu_count": 2})
finished_run(LAB, report(), params={"exercise": "ring-allreduce", "lang": "en"}, learner_id=me,
             source="def ring_allreduce(tensor): ...")
pages = sorted(p.stem for p in Path("app/views").glob("*.py"))
assert {"home", "labs", "exercises", "admin"} <= set(pages), pages
for page in pages:
    params = {"labs": {"lab": "ring"}, "exercises": {"exercise": "ring-allreduce"}}.get(page, {})
    state = {"lab_run_id": ring} if page == "labs" else None
    at = open_page(page, "en", me, state=state, **params)
    assert not at.exception, (page, at.exception)
    assert [m for m in sys.modules if m == "torch" or m.startswith("torch.")] == [], page
print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=180,
                         env={**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'app.db'}"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_each_lab_keeps_torch_in_its_rank_code():
    """The other half of the seam: a lab's ``RANK_MODULE`` is where its torch is, and each
    lab module names one that has ``run_rank``."""
    from labs.context import LABS, load_lab, rank_code

    for lab in LABS:
        assert not hasattr(load_lab(lab), "run_rank"), lab
        assert callable(rank_code(lab).run_rank), lab
