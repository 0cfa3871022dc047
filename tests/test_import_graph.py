"""The house's one-way flow, read from the source with `ast`: every import of a tdsl module
(at the top of a file or inside a function) points down the layers of docs/internals.md, and no
import circle joins two rooms."""
import ast
import functools
import os

import pytest

import tdsl

ROOT = os.path.dirname(os.path.abspath(tdsl.__file__))

# lowest first; a room may import only rooms listed before it (itself aside)
LAYERS = ["errors", "config", "tracebacks", "deep", "dtypes", "version", "target", "ir", "arith", "script", "intrinsics", "schedule",
          "auto",
          "lower", "interp", "interpreter", "backends", "tuner", "torch"]
TOP = ("tdsl", "__main__")  # the public facade and the demo: nothing imports them


def _module_name(path: str) -> str:
    rel = os.path.relpath(path, os.path.dirname(ROOT))[:-3].replace(os.sep, ".")
    return rel[:-len(".__init__")] if rel.endswith(".__init__") else rel


def _is_module(name: str) -> bool:
    base = os.path.join(os.path.dirname(ROOT), *name.split("."))
    return os.path.isfile(base + ".py") or os.path.isfile(os.path.join(base, "__init__.py"))


@functools.cache
def imports() -> list[tuple[str, str, str]]:
    """(importing module, imported module, file:line) for every tdsl import in the package."""
    out = []
    for dirpath, _, files in os.walk(ROOT):
        for f in sorted(files):
            if not f.endswith(".py"):
                continue
            path = os.path.join(dirpath, f)
            mod = _module_name(path)
            package = mod if f == "__init__.py" else mod.rpartition(".")[0]
            with open(path, encoding="utf-8") as fh:
                tree = ast.parse(fh.read(), path)
            for node in ast.walk(tree):
                where = f"{os.path.relpath(path, ROOT)}:{getattr(node, 'lineno', 0)}"
                if isinstance(node, ast.Import):
                    out += [(mod, a.name, where) for a in node.names if a.name.split(".")[0] == "tdsl"]
                elif isinstance(node, ast.ImportFrom):
                    if node.level:
                        parts = package.split(".")
                        base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
                    else:
                        base = node.module or ""
                    if base.split(".")[0] != "tdsl":
                        continue
                    for a in node.names:  # `from . import x` imports the module x
                        target = f"{base}.{a.name}"
                        out.append((mod, target if _is_module(target) else base, where))
    return out


def room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "tdsl"


def edges() -> dict[tuple[str, str], str]:
    found: dict[tuple[str, str], str] = {}
    for src, dst, where in imports():
        a, b = room(src), room(dst)
        if a != b:
            found.setdefault((a, b), f"{src} -> {dst} ({where})")
    return found


def test_the_scan_sees_imports():
    found = edges()
    assert ("schedule", "ir") in found and ("backends", "lower") in found  # lazy imports count too
    assert set(room(m) for m, _, _ in imports()) >= {"ir", "arith", "schedule", "lower", "backends"}


def test_every_room_is_in_a_layer():
    rooms = {room(m) for m, _, _ in imports()} | {room(d) for _, d, _ in imports()}
    unknown = rooms - set(LAYERS) - set(TOP)
    assert not unknown, f"add the new room(s) {sorted(unknown)} to LAYERS here and to docs/internals.md"


def test_imports_point_down():
    rank = {name: k for k, name in enumerate(LAYERS)}
    upward = [why for (a, b), why in edges().items()
              if (b in TOP and a not in TOP) or (a in rank and b in rank and rank[b] > rank[a])]
    assert not upward, "imports that point up the house:\n" + "\n".join(sorted(upward))


def test_no_import_circle_between_rooms():
    graph: dict[str, set[str]] = {}
    for a, b in edges():
        graph.setdefault(a, set()).add(b)
    assert _first_cycle(graph) is None, "import circle: " + " -> ".join(_first_cycle(graph) or [])


def _first_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def test_no_import_circle_inside_the_schedule_room():
    """Between the modules of tdsl/schedule (imports inside functions count): the facade's parts
    stand on schedule/base.py, composites above the primitives, analyses below them."""
    graph: dict[str, set[str]] = {}
    for src, dst, _ in imports():
        if src != dst and room(src) == room(dst) == "schedule":
            graph.setdefault(src, set()).add(dst)
    assert len(graph) > 20   # the scan sees the room's modules
    cycle = _first_cycle(graph)
    assert cycle is None, "import circle inside tdsl/schedule: " + " -> ".join(cycle or [])


@pytest.mark.parametrize("name, modules", [("backends", 15), ("arith", 8)])
def test_no_import_circle_inside_the_backends_and_arith_rooms(name, modules):
    """Between the modules of tdsl/backends and of tdsl/arith (imports inside functions count):
    backends/__init__ only dispatches to llvm.build_llvm / cuda.build_cuda, the CUDA host plan
    has its own module (cuda/plan.py), the export format its constants in llvm/abi.py; the
    analyzer's parts (int_bound, rewrite) stand on bounds, linear and fold."""
    graph: dict[str, set[str]] = {}
    for src, dst, _ in imports():
        if src != dst and room(src) == room(dst) == name:
            graph.setdefault(src, set()).add(dst)
    assert len(graph) > modules   # the scan sees the room's modules
    cycle = _first_cycle(graph)
    assert cycle is None, f"import circle inside tdsl/{name}: " + " -> ".join(cycle or [])


def test_the_named_rules_of_issue_15():
    found = edges()
    assert ("lower", "schedule") not in found, found.get(("lower", "schedule"))
    for banned in ("script", "schedule", "arith"):
        assert ("ir", banned) not in found, found.get(("ir", banned))
    assert ("intrinsics", "schedule") not in found, found.get(("intrinsics", "schedule"))


# inside tdsl/schedule, lowest first; a module may import its own level and the levels before it
SCHEDULE_LAYERS = [{"errors", "handles", "values", "instruction", "tvm_spelling", "tree"}, {"analysis"},
                   {"primitives"}, {"base"}, {"composites"}, {"methods"}, {"trace_json", "diffs"}, {"trace"},
                   {"schedule"}, {"sampling", "library", "__init__"}]


def test_schedule_room_imports_point_down():
    def level(module: str) -> int:
        parts = module.split(".")
        part = parts[2] if len(parts) > 2 else "__init__"
        found = [k for k, names in enumerate(SCHEDULE_LAYERS) if part in names]
        assert found, f"add tdsl/schedule/{part} to SCHEDULE_LAYERS here and to docs/internals.md"
        return found[0]

    upward = [f"{src} -> {dst} ({where})" for src, dst, where in imports()
              if room(src) == room(dst) == "schedule" and level(dst) > level(src)]
    assert not upward, "imports that point up inside tdsl/schedule:\n" + "\n".join(sorted(upward))
