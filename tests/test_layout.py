"""The shape of ``core/`` that a newcomer relies on: a small root, sub-packages whose modules
have distinct names, one class per name, no import cycles, no file past the size rule, and
packages that import one way: each only the packages below it in docs/architecture.md's
"Package order".

These read the source as text (``ast``), import nothing, and run in well under a second."""

import ast
import re
from collections import defaultdict
from pathlib import Path

CORE = Path(__file__).resolve().parents[1] / "core"
ARCHITECTURE = CORE.parent / "docs" / "architecture.md"
MAX_ROOT_MODULES = 15
MAX_LINES = 400


def _modules() -> dict[str, Path]:
    """'core.settings.config' -> its path, for every module and package of core."""
    out = {}
    for path in sorted(CORE.rglob("*.py")):
        parts = path.relative_to(CORE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _near_namesakes(a: str, b: str) -> bool:
    """'field'/'fields', 'names'/'method_names', 'attention'/'attention_maps'."""
    short, long = sorted((a, b), key=len)
    return (
        long in (short + "s", short + "es")
        or long.startswith(short + "_")
        or (long.endswith("_" + short))
    )


def test_root_holds_few_modules():
    root = [p.name for p in CORE.glob("*.py")]
    assert len(root) <= MAX_ROOT_MODULES, sorted(root)


def test_no_sibling_modules_are_near_namesakes():
    siblings: dict[Path, list[str]] = defaultdict(list)
    for entry in CORE.rglob("*"):
        if "__pycache__" in entry.parts or entry.name.startswith("__"):
            continue
        if entry.suffix == ".py" or (entry.is_dir() and (entry / "__init__.py").exists()):
            siblings[entry.parent].append(entry.stem)
    clashes = [
        (str(folder.relative_to(CORE.parent)), a, b)
        for folder, names in siblings.items()
        for i, a in enumerate(sorted(names))
        for b in sorted(names)[i + 1 :]
        if _near_namesakes(a, b)
    ]
    assert clashes == []


def test_every_class_name_is_defined_once():
    where: dict[str, list[str]] = defaultdict(list)
    for name, path in _modules().items():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                where[node.name].append(name)
            # type aliases of callables and protocols count as names too (two ``Executor``s)
            elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Subscript):
                callable_alias = getattr(node.value.value, "id", "") == "Callable"
                for target in node.targets:
                    if callable_alias and isinstance(target, ast.Name) and target.id[:1].isupper():
                        where[target.id].append(name)
    assert {k: v for k, v in where.items() if len(v) > 1} == {}


def test_no_file_over_the_size_rule():
    long = {
        str(p.relative_to(CORE.parent)): n
        for p in CORE.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


def _package(path: Path, name: str) -> str:
    """The package a module's relative imports start from."""
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def _imported(node: ast.AST, package: str) -> set[str]:
    """What one statement imports, as dotted names ('from core.runs import plan' -> core.runs
    and core.runs.plan; relative imports resolved against ``package``); nothing for others."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names}
    if not isinstance(node, ast.ImportFrom):
        return set()
    base = node.module or ""
    if node.level:
        up = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join([*up, base] if base else up)
    return {base} | {f"{base}.{a.name}" for a in node.names}


def _imports(path: Path, name: str, known: set[str]) -> set[str]:
    """Modules of core that ``name`` imports at its top level (not inside functions)."""
    package = _package(path, name)
    out = set()
    for node in ast.parse(path.read_text()).body:
        out |= _imported(node, package)
    return {m for m in out if m in known and m != name}


def test_no_import_cycles():
    mods = _modules()
    graph = {name: _imports(path, name, set(mods)) for name, path in mods.items()}
    # a package's __init__ importing its own submodules is not a cycle through the package
    for name in graph:
        graph[name] = {m for m in graph[name] if not m.startswith(name + ".")}
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt) :], nxt] if nxt in stack else [node, nxt])
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert cycles == []


def test_the_namesake_rule_catches_the_old_clashes():
    for a, b in [("field", "fields"), ("names", "method_names"), ("attention", "attention_maps")]:
        assert _near_namesakes(a, b) and _near_namesakes(b, a)
    for a, b in [("config", "commands"), ("grid", "executors"), ("load", "catalog")]:
        assert not _near_namesakes(a, b)


# ---- packages import one way ---------------------------------------------------------------------
# Imports that go up the package order, (importing module, imported module) -> why it may. At
# most three; an exception the code no longer needs fails below, so the list only shrinks.
UPWARD_EXCEPTIONS: dict[tuple[str, str], str] = {}
MAX_EXCEPTIONS = 3


def package_order(text: str) -> list[str]:
    """The units of core, lowest first, as the "Package order" section of ``text`` numbers
    them: '3. `core/settings/` ...' -> 'settings', '1. `core/errors.py` ...' -> 'errors'."""
    section = text.split("\n## Package order\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\d+\. `core/(\w+)(?:/|\.py)`", section, flags=re.MULTILINE)


def _unit(module: str) -> str | None:
    """'core.settings.config' -> 'settings', 'core.names' -> 'names'; None for core itself and
    anything outside it."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "core" else None


def upward_imports(
    sources: dict[str, tuple[Path, str]], order: list[str], known: set[str]
) -> list[tuple[str, str, str]]:
    """(where, importing module, imported module) for every import, at the top or inside a
    function, of a module of a higher unit than the importer's; ``sources``: module -> (path,
    source text)."""
    rank = {unit: i for i, unit in enumerate(order)}
    found = set()
    for name, (path, text) in sources.items():
        src = _unit(name)
        for node in ast.walk(ast.parse(text)):
            for target in _imported(node, _package(path, name)) & known:
                dst = _unit(target)
                if src and dst and rank[dst] > rank[src]:
                    found.add((f"{path}:{node.lineno}", name, target))
    # 'from core.runs import plan' names core.runs and core.runs.plan: report the module only
    return sorted(
        (w, n, t)
        for w, n, t in found
        if not any((v, m) == (w, n) and s.startswith(t + ".") for v, m, s in found)
    )


def test_the_package_order_lists_every_unit_of_core_once():
    order = package_order(ARCHITECTURE.read_text())
    units = {u for m in _modules() if (u := _unit(m))}
    assert len(order) == len(set(order)), order
    assert set(order) == units, (sorted(units - set(order)), sorted(set(order) - units))


def test_no_package_imports_one_above_it():
    mods = _modules()
    sources = {n: (p.relative_to(CORE.parent), p.read_text()) for n, p in mods.items()}
    order = package_order(ARCHITECTURE.read_text())
    upward = upward_imports(sources, order, set(mods))
    unexplained = [
        f"{where} ({name}): imports {target}, a package above it"
        for where, name, target in upward
        if (name, target) not in UPWARD_EXCEPTIONS
    ]
    assert unexplained == []
    assert len(UPWARD_EXCEPTIONS) <= MAX_EXCEPTIONS
    stale = set(UPWARD_EXCEPTIONS) - {(n, t) for _, n, t in upward}
    assert stale == set(), "exceptions the code no longer needs: drop them"


def test_core_never_imports_the_app():
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            roots = {m.split(".")[0] for m in _imported(node, _package(path, name))}
            assert not roots & {"pages", "app"}, f"{path}:{node.lineno}"


def test_the_order_rule_catches_upward_imports_at_any_depth():
    order = ["names", "settings", "runs", "cli"]
    here = Path("x.py")
    sources = {
        "core.settings.config": (here, "from core.runs import plan\nfrom core.names import A\n"),
        "core.runs.plan": (here, "import core.settings.config\n\ndef f():\n    import core.cli\n"),
        "core.runs": (Path("__init__.py"), "from . import plan\n"),
        "core.cli": (Path("__init__.py"), "from ..runs import plan\nfrom .. import names\n"),
    }
    known = {*sources, "core.names"}
    assert upward_imports(sources, order, known) == [
        ("x.py:1", "core.settings.config", "core.runs.plan"),
        ("x.py:4", "core.runs.plan", "core.cli"),
    ]
