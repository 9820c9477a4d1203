"""The shape of ``core/`` that a newcomer relies on: a small root, sub-packages whose modules
have distinct names, one class per name, no import cycles and no file past the size rule.

These read the source as text (``ast``), import nothing, and run in well under a second."""

import ast
from collections import defaultdict
from pathlib import Path

CORE = Path(__file__).resolve().parents[1] / "core"
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


def _imports(path: Path, name: str, known: set[str]) -> set[str]:
    """Modules of core that ``name`` imports at its top level (not inside functions)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            out.add(base)
            out |= {f"{base}.{a.name}" for a in node.names}
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
