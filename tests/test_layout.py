"""The package's shape: imports only go down the layers, no source file over 400 lines, tests never skip on an
ImportError of dgmoe itself."""
import ast
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "dgmoe"
TESTS = Path(__file__).resolve().parent

#: bottom to top; a package may import only from lower layers
LAYERS = [
    {"errors"},
    {"registry", "seeding"},
    {"scope"},
    {"sharding", "hparams", "metrics", "selection"},
    {"moe", "data"},
    {"models"},
    {"algorithms"},
    {"engine"},
    {"analysis", "sweep", "bench"},
    {"experiments", "report"},
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


def test_no_source_file_over_400_lines():
    long = {str(p.relative_to(SRC)): n for p in SRC.rglob("*.py") if (n := len(p.read_text().splitlines())) > 400}
    assert not long, long


def test_no_test_skips_on_an_import_error_of_dgmoe():
    calls = ["importorskip(" + quote + "dgmoe" for quote in "\"'"]  # (spelled apart so this file does not match)
    offenders = [str(p.relative_to(TESTS)) for p in TESTS.rglob("*.py") if any(c in p.read_text() for c in calls)]
    assert not offenders, offenders
