"""The package's shape: imports only go down the layers, no import circle between files (inside a package
too), no file named like a Windows device, no source file over 400 lines, tests never skip on an ImportError
of dgmoe itself."""
import ast
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "dgmoe"
TESTS = Path(__file__).resolve().parent

#: bottom to top; a package may import only from lower layers
LAYERS = [
    {"errors", "tables"},
    {"registry", "seeding", "records", "settings", "document", "atomic"},
    {"scope", "duplicates", "names", "devices", "peft"},
    {"sharding", "hparams", "metrics", "selection"},
    {"moe", "data"},
    {"models"},
    {"algorithms"},
    {"engine"},
    {"analysis", "sweep", "bench"},
    {"experiments", "report"},
    {"posthoc"},
    {"recipes"},
    {"cli"},
    {"__main__", "__init__"},
]
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}


def _package(path: Path) -> str:
    rel = path.relative_to(SRC)
    return rel.parts[0].removesuffix(".py") if len(rel.parts) > 1 or rel.name != "__init__.py" else "__init__"


def import_edges() -> dict[tuple[str, str], list[str]]:
    """(importing package, imported package) -> where, for every dgmoe import at any depth of a module."""
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for path in SRC.rglob("*.py"):
        source = _package(path)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("dgmoe."):
                targets = [node.module]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.startswith("dgmoe.")]
            else:
                continue
            for target in targets:
                imported = target.split(".")[1]
                if imported != source:
                    edges[(source, imported)].append(f"{path.relative_to(SRC)}:{node.lineno}")
    return edges


def test_every_package_has_a_layer():
    packages = {_package(p) for p in SRC.rglob("*.py")}
    assert packages <= set(RANK), sorted(packages - set(RANK))


def test_imports_only_go_down():
    upward = {f"{a} -> {b} ({where[0]})" for (a, b), where in import_edges().items() if RANK[b] >= RANK[a]}
    assert not upward, sorted(upward)


def _module(path: Path) -> str:
    parts = ("dgmoe", *path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def file_edges() -> dict[str, set[str]]:
    """module -> the dgmoe modules it imports (at any depth: a deferred import inside a function counts too);
    `from dgmoe.a import b` imports the module `dgmoe.a.b` when there is one, else `dgmoe.a`."""
    modules = {_module(p): p for p in SRC.rglob("*.py")}
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("dgmoe"):
                targets = [t if (t := f"{node.module}.{a.name}") in modules else node.module for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.startswith("dgmoe")]
            edges[module] |= {t for t in targets if t in modules and t != module}
    return edges


def import_circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return circles


def test_import_circles_are_found():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_circles(edges) == [["a", "b", "c"]]
    assert import_circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle_between_files():
    assert not import_circles(file_edges())


#: names Windows reserves for devices, with any extension (a checkout with such a file fails there)
WINDOWS_DEVICES = {"con", "prn", "aux", "nul", *(f"com{i}" for i in range(1, 10)), *(f"lpt{i}" for i in range(1, 10))}


def test_no_file_named_like_a_windows_device():
    root = SRC.parents[1]
    tops = [root / top for top in ("src", "tests", "docs", "scripts", "examples") if (root / top).exists()]
    named = [str(p.relative_to(root)) for top in tops for p in top.rglob("*")
             if p.name.split(".")[0].lower() in WINDOWS_DEVICES]
    assert not named, named


def test_no_source_file_over_400_lines():
    long = {str(p.relative_to(SRC)): n for p in SRC.rglob("*.py") if (n := len(p.read_text().splitlines())) > 400}
    assert not long, long


def test_no_test_skips_on_an_import_error_of_dgmoe():
    calls = ["importorskip(" + quote + "dgmoe" for quote in "\"'"]  # (spelled apart so this file does not match)
    offenders = [str(p.relative_to(TESTS)) for p in TESTS.rglob("*.py") if any(c in p.read_text() for c in calls)]
    assert not offenders, offenders
