"""The package's floors import only downward, with no circle (docs/design.md): a circle dodged by a
function-local import is still a circle, so local imports count as edges here too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "traceattr"

# top to bottom; a module may import its own floor and those below it
FLOORS = {
    "traceattr.__main__": 9, "traceattr.entry": 8, "traceattr.cli": 7,
    "traceattr.interop": 6.5,           # HTA notebooks: imports anything, imported by nothing
    "traceattr.api": 6,                 # the public functions: "path, store or TraceSet?" decided here
    "traceattr.pipelines": 6,           # the commands' pipelines: discover, caches, stores, plans -> a table
    "traceattr.report": 5,              # rendering only: it never reads a file
    "traceattr.analysis": 4,            # tables, as partials and their plans
    "traceattr.engine": 3,              # units, partials, placement, runners
    "traceattr.attribution": 2,         # sweep, links, cut: primitives on one file's columns
    "traceattr.capture": 1.5,           # runs inside training: io's manifest format and below, nothing more
    "traceattr.io": 1,                  # discover, decode, store, cache
    "traceattr.model": 0, "traceattr.schema": 0, "traceattr.errors": 0, "traceattr.units": 0,
    "traceattr.names": 0, "traceattr.demangle": 0, "traceattr.allocator": 0, "traceattr.captures": 0, "traceattr": 0,
    "traceattr.builder": 10,            # test data: no runtime module imports it
}
IMPORTED_BY_NOBODY = ("traceattr.interop", "traceattr.builder")
LAZY_MARK = "# lazy:"                  # a function-local import of the package's own modules says why on its line
LAZY_UNCHECKED: tuple[str, ...] = ()     # every module is checked

# report/ renders what the pipelines hand it (issue 35): it reaches no io, engine, pipeline or plan (the
# analyses' *_plan modules and run_tables map files), and opens, reads and lists no file. report/output.py
# opens one file, the `-o FILE` it writes: output, not input.
RENDERING = "traceattr.report"
NOT_FOR_RENDERING = ("traceattr.io", "traceattr.engine", "traceattr.pipelines", "traceattr.analysis.run_tables")
PLAN_SUFFIX = "_plan"                  # analysis/summary_plan.py, page_plan.py, ...
WRITES_OUTPUT_ONLY = ("traceattr.report.output",)
# calls that open, read or list files: open(), os.open, Path.open/read_text/read_bytes, json/np/pickle load,
# pd./pq. read_*, os.listdir/scandir/walk, glob, Path.iterdir/glob/rglob
FILE_CALLS = {"open", "read_text", "read_bytes", "load", "fromfile", "listdir", "scandir", "walk", "glob",
              "iglob", "rglob", "iterdir"}


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(("traceattr",) + path.relative_to(PACKAGE).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def _targets(node: ast.AST, package: str) -> list[str]:
    """What an import statement names: `import a.b` -> a.b; `from a import b, c` -> a.b, a.c (a module, or
    a name module a defines: the caller resolves it up to the nearest module); [] for any other node."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:
        parts = package.split(".")
        base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
    return [f"{base}.{alias.name}" for alias in node.names]


def _edges(modules: dict[str, Path]) -> set[tuple[str, str, int]]:
    """(importer, imported, line) for every import of the package's own modules, local ones included."""
    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    edges = set()
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(tree):
            for target in _targets(node, package):
                found = resolve(target) if target.split(".")[0] == "traceattr" else None
                if found and found != name:
                    edges.add((name, found, node.lineno))
    return edges


def _unmarked_local_imports(modules: dict[str, Path]) -> list[str]:
    """`module:line` of every import inside a function of one of the package's own modules whose lines carry
    no LAZY_MARK (docs/design.md: only to avoid a start-up cost or load an optional dependency, and each
    says which). Imports under `if TYPE_CHECKING:` run never and do not count."""
    def own(name: str) -> bool:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return bool(name)

    found = []
    for name, path in modules.items():
        if any(name == prefix or name.startswith(prefix + ".") for prefix in LAZY_UNCHECKED):
            continue
        source = path.read_text(encoding="utf-8")
        lines, tree = source.splitlines(), ast.parse(source)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        never = {id(node) for test in ast.walk(tree)
                 if isinstance(test, ast.If) and "TYPE_CHECKING" in ast.unparse(test.test)
                 for node in ast.walk(test)}
        local = {id(node) for function in ast.walk(tree)
                 if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
                 for node in ast.walk(function) if node is not function}
        for node in ast.walk(tree):
            if id(node) not in local or id(node) in never:
                continue
            targets = _targets(node, package)
            if not targets:
                continue
            if not any(target.split(".")[0] == "traceattr" and own(target) for target in targets):
                continue
            if not any(LAZY_MARK in line for line in lines[node.lineno - 1:node.end_lineno]):
                found.append((name, node.lineno, lines[node.lineno - 1].strip()))
    return [f"{name}:{line}: {text}" for name, line, text in sorted(found)]


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def _file_calls(modules: dict[str, Path]) -> list[str]:
    """`module:line: call` of every call, in the given modules, that opens, reads or lists a file (FILE_CALLS,
    or any `read_*` attribute: pandas', pyarrow's and parquet's readers)."""
    found = []
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            called = node.func.id if isinstance(node.func, ast.Name) else \
                node.func.attr if isinstance(node.func, ast.Attribute) else ""
            if called in FILE_CALLS or called.startswith("read_"):
                found.append(f"{name}:{node.lineno}: {ast.unparse(node.func)}(")
    return sorted(found)


def _floor(module: str) -> float:
    best = max((prefix for prefix in FLOORS if module == prefix or module.startswith(prefix + ".")), key=len)
    return FLOORS[best]


def _circles(edges) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    graph: dict[str, set[str]] = {}
    for a, b, _ in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


@pytest.fixture(scope="module")
def edges():
    return _edges(_modules())


def test_no_import_circle(edges):
    assert _circles(edges) == []


def test_every_import_goes_down_a_floor_or_stays_on_it(edges):
    upward = sorted(f"{a}:{line} imports {b}" for a, b, line in edges if _floor(b) > _floor(a))
    assert upward == []


def test_nothing_imports_the_interop_or_the_test_data_builder(edges):
    wrong = sorted(f"{a}:{line} imports {b}" for a, b, line in edges for prefix in IMPORTED_BY_NOBODY
                   if b.startswith(prefix) and not a.startswith(prefix))
    assert wrong == []


def test_the_pipelines_import_not_the_api(edges):
    """pipelines/ shares the API's floor (cli and api both call it): the API decides "path, store or
    TraceSet?" and calls a pipeline, never the reverse."""
    wrong = sorted(f"{a}:{line} imports {b}" for a, b, line in edges
                   if _within(a, "traceattr.pipelines") and _within(b, "traceattr.api"))
    assert wrong == []


def test_report_imports_no_io_engine_pipeline_or_plan(edges):
    """Rendering takes finished tables: what discovers, decodes, caches or runs plans over files (io, engine,
    the plans, pipelines) is never imported by report/; the analyses' table helpers and names are."""
    wrong = sorted(f"{a}:{line} imports {b}" for a, b, line in edges if _within(a, RENDERING)
                   and (any(_within(b, prefix) for prefix in NOT_FOR_RENDERING) or b.endswith(PLAN_SUFFIX)))
    assert wrong == []


def test_report_opens_reads_and_lists_no_file():
    """report/ never touches input: only report/output.py opens a file, the one `-o FILE` names, to write it."""
    rendering = {name: path for name, path in _modules().items()
                 if _within(name, RENDERING) and not any(_within(name, out) for out in WRITES_OUTPUT_ONLY)}
    assert _file_calls(rendering) == []


def test_the_file_call_check_catches_what_it_claims(tmp_path):
    """Opening, reading and listing files are found, by name or attribute; parsing text, writing and
    string methods are not."""
    (tmp_path / "a.py").write_text(
        "import json, os\nfrom pathlib import Path\nimport pandas as pd\n"
        "def f(p, text, handle):\n"
        "    open(p)\n"
        "    Path(p).read_text()\n"
        "    pd.read_parquet(p)\n"
        "    os.listdir(p)\n"
        "    json.load(handle)\n"
        "    json.loads(text)\n"
        "    handle.write(text)\n"
        "    text.split()\n")
    assert _file_calls({"traceattr.report.a": tmp_path / "a.py"}) == [
        "traceattr.report.a:5: open(", "traceattr.report.a:6: Path(p).read_text(",
        "traceattr.report.a:7: pd.read_parquet(", "traceattr.report.a:8: os.listdir(",
        "traceattr.report.a:9: json.load("]


def test_every_function_local_import_of_the_package_says_why_it_is_lazy():
    """A local import dodges a start-up cost (the cached answer imports no pandas) or loads an optional
    dependency; one that dodges nothing belongs at the module's top. Each kept one says which: `# lazy: why`."""
    assert _unmarked_local_imports(_modules()) == []


def test_the_lazy_check_catches_what_it_claims(tmp_path):
    """Unmarked local imports of the package are found, absolute and relative; marked ones, module-level ones,
    other packages' and those under `if TYPE_CHECKING:` are not."""
    (tmp_path / "a.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "import traceattr.io.b\n"
        "if TYPE_CHECKING:\n    from traceattr.io import b\n"
        "def f():\n"
        "    import json\n"
        "    from traceattr.io import b\n"
        "    from . import b   # lazy: b is slow to import\n"
        "    if TYPE_CHECKING:\n        from traceattr.io.b import g\n"
        "    def inner():\n        from .b import g\n"
        "    from traceattr.io.b import (\n        g,   # lazy: any line of the statement\n    )\n")
    (tmp_path / "b.py").write_text("def g():\n    pass\n")
    modules = {"traceattr.io.a": tmp_path / "a.py", "traceattr.io.b": tmp_path / "b.py"}
    assert _unmarked_local_imports(modules) == ["traceattr.io.a:7: from traceattr.io import b",
                                                "traceattr.io.a:12: from .b import g"]


def test_the_checks_catch_what_they_claim(tmp_path):
    """An upward import and a circle, planted in a copy of a small package, are both found."""
    modules = {"traceattr.io.a": tmp_path / "a.py", "traceattr.analysis.b": tmp_path / "b.py"}
    (tmp_path / "a.py").write_text("def f():\n    from traceattr.analysis import b\n")
    (tmp_path / "b.py").write_text("from traceattr.io import a\n")
    planted = _edges(modules)
    assert {(a, b) for a, b, _ in planted} == {("traceattr.io.a", "traceattr.analysis.b"),
                                               ("traceattr.analysis.b", "traceattr.io.a")}
    assert _circles(planted) == [["traceattr.analysis.b", "traceattr.io.a"]]
    assert [a for a, b, _ in planted if _floor(b) > _floor(a)] == ["traceattr.io.a"]
