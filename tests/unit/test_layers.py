"""The package's layers (docs/architecture.md, "Layers"): a module imports only from its own layer or
below, no import cycle exists between modules or between folders, and the engine's code names no
benchmark (outside comments and docstrings).

Every import counts: at module level, inside a function, and under ``if TYPE_CHECKING:`` (a type
named from a layer above is a dependency on it all the same). The table below is the one in the
docs; a new module must be placed in it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "lib" / "halluscope"

# layer -> module prefixes (dotted, under halluscope); the longest matching prefix places a module
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("L0 core", ("halluscope", "errors", "records", "ratelimit", "imports", "quiet", "retry", "quantity")),
    ("L1 storage", ("storage", "sources")),
    ("L2 contract", ("contract",)),
    ("L3 config", ("config", "task_registry", "provider_registry")),
    ("L4 models, knowledge", ("models", "knowledge")),
    ("L5 accounting, serving", ("cost", "serving", "runkit")),
    ("L6 benchmarks, report", ("halogen", "hallulens", "ragtruth", "fewl", "report")),
    ("L7 resolution", ("resolve",)),
    ("L8 engine", ("pipeline",)),
    ("L9 entry points", ("cli", "kuberay", "kuberay_cli", "preflight", "kueue", "kueue_cli", "service_logs",
                          "service_logs_cli")),
]


def modules(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package at ``root``."""
    out = {}
    for f in root.rglob("*.py"):
        parts = list(f.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = f
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules ``name`` imports anywhere in its file, type-only imports included."""
    tree = ast.parse(path.read_text(), str(path))
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level:
                mod = ".".join(package[: len(package) - node.level + 1] + ([mod] if mod else []))
            targets = [mod] + [f"{mod}.{a.name}" for a in node.names]  # a name may be a submodule
        else:
            continue
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                out.add(t)
    return out


def layer_of(module: str) -> int | None:
    rel = module.removeprefix("halluscope.") if module != "halluscope" else "halluscope"
    best: tuple[int, int] | None = None  # (prefix length, layer)
    for level, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (rel == p or rel.startswith(p + ".")) and (best is None or len(p) > best[0]):
                best = (len(p), level)
    return None if best is None else best[1]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def folder(module: str) -> str:
    """A sub-package, or a top-level module on its own (as ../shared/tools/import_cycles.py)."""
    return ".".join(module.split(".")[:2])


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    known = modules(PACKAGE)
    return {m: imports(m, f, known) for m, f in known.items()}


def test_every_module_has_a_layer(graph):
    assert [m for m in sorted(graph) if layer_of(m) is None] == []


def test_no_import_runs_up_a_layer(graph):
    up = [f"{m} ({LAYERS[layer_of(m)][0]}) imports {t} ({LAYERS[layer_of(t)][0]})"
          for m, targets in sorted(graph.items()) for t in sorted(targets)
          if None not in (layer_of(m), layer_of(t)) and layer_of(t) > layer_of(m)]
    assert up == []


def test_no_module_cycle(graph):
    assert cycles(graph) == []


def test_no_folder_cycle(graph):
    folders: dict[str, set[str]] = {}
    for m, targets in graph.items():
        folders.setdefault(folder(m), set()).update(folder(t) for t in targets if folder(t) != folder(m))
    assert cycles(folders) == []


def test_the_checks_see_what_they_check(tmp_path):
    """A function-level import up a layer, a TYPE_CHECKING import and a cycle are found."""
    pkg = tmp_path / "halluscope"
    (pkg / "storage").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "storage" / "__init__.py").write_text("")
    (pkg / "storage" / "fs.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from halluscope.cli import main\n"
        "def f():\n    from halluscope import config\n")
    (pkg / "config.py").write_text("from halluscope.storage import fs\n")
    (pkg / "cli.py").write_text("")
    known = modules(pkg)
    g = {m: imports(m, f, known) for m, f in known.items()}
    assert g["halluscope.storage.fs"] == {"halluscope", "halluscope.config", "halluscope.cli"}
    assert layer_of("halluscope.config") > layer_of("halluscope.storage.fs")
    assert cycles(g) == [["halluscope.config", "halluscope.storage.fs"]]


ENGINE = ("pipeline", "resolve", "report", "config", "storage", "models", "serving", "runkit.py", "cli.py")


def benchmark_names_in_code(path: Path, names: list[str], root: Path = PACKAGE) -> list[str]:
    """Tokens of ``path`` outside comments and docstrings that contain a benchmark's name."""
    import io
    import re
    import tokenize

    src = path.read_text()
    docstrings = set()
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                docstrings.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    pattern = re.compile("|".join(map(re.escape, names)), re.IGNORECASE)
    return [f"{path.relative_to(root)}:{tok.start[0]}: {tok.string[:80]}"
            for tok in tokenize.generate_tokens(io.StringIO(src).readline)
            if tok.type != tokenize.COMMENT and tok.start[0] not in docstrings and pattern.search(tok.string)]


def test_the_engine_names_no_benchmark():
    """A benchmark reaches the engine only through the Benchmark it registers."""
    from halluscope.task_registry import benchmarks

    names = sorted(benchmarks())
    files = [f for part in ENGINE for f in ([PACKAGE / part] if part.endswith(".py")
                                            else sorted((PACKAGE / part).rglob("*.py")))]
    assert len(files) > 40 and len(names) >= 4
    assert [hit for f in files for hit in benchmark_names_in_code(f, names)] == []


def test_the_name_check_sees_code_and_skips_comments_and_docstrings(tmp_path):
    f = tmp_path / "probe.py"
    f.write_text('"""About halogen."""\n# halogen here\nx = "halogen/code"\n')
    assert benchmark_names_in_code(f, ["halogen"], tmp_path) == ['probe.py:3: "halogen/code"']


def test_no_function_of_the_engine_is_over_60_lines():
    """The engine's steps stay readable one at a time: a longer function is split by what it does."""
    long = []
    for name, path in modules(PACKAGE).items():
        if not name.startswith("halluscope.pipeline"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 60:
                long.append(f"{name}.{node.name}: {node.end_lineno - node.lineno + 1} lines")
    assert not long, long


PROVIDER_SIDE = ("models", "serving", "config")  # the providers, their registry, and the configs they declare
MODEL_KINDS = {"ReplayModel", "RecordedModel", "OpenAIModel", "ScriptedModel", "HFModel", "VLLMModel"}


def kind_branches(path: Path, root: Path = PACKAGE) -> list[str]:
    """Where ``path`` compares a model's ``backend`` or asks ``isinstance`` of a backend's config class."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Compare):  # == "vllm", in ("replay", ...); not "is None"
            hit = any(isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops) and \
                any(isinstance(x, ast.Attribute) and x.attr == "backend" for x in [node.left, *node.comparators])
        elif isinstance(node, ast.Match):
            hit = isinstance(node.subject, ast.Attribute) and node.subject.attr == "backend"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance":
            hit = any(isinstance(n, ast.Name) and n.id in MODEL_KINDS for a in node.args[1:] for n in ast.walk(a))
        else:
            continue
        if hit:
            found.append((node.lineno, f"{path.relative_to(root)}:{node.lineno}"))
    return [where for _, where in sorted(found)]


def test_no_branch_on_a_backends_kind_outside_the_providers():
    """The engine asks a model's config what it declares (served, replayed, billing, ...) and its
    provider kind what it knows (registry.predicted), never which backend it is: a new provider is
    its own module and one entry-point line (examples/echo_provider)."""
    files = [f for f in sorted(PACKAGE.rglob("*.py")) if f.relative_to(PACKAGE).parts[0] not in PROVIDER_SIDE]
    assert len(files) > 100
    assert [hit for f in files for hit in kind_branches(f)] == []


def test_the_kind_check_sees_comparisons_matches_and_isinstance(tmp_path):
    f = tmp_path / "probe.py"
    f.write_text('if m.backend == "vllm": pass\nif isinstance(m, (ReplayModel, X)): pass\n'
                 'match m.backend:\n    case "x": pass\nif m.role == "test": pass\n')
    assert kind_branches(f, tmp_path) == ["probe.py:1", "probe.py:2", "probe.py:3"]
