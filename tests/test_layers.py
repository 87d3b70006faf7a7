"""The package's shape: layers import downward only, and the planning side never loads torch.

LAYERS is the chain docs/architecture.md draws, bottom up; a module may import from its
own layer and the layers below (every import statement counts, those inside
functions too, and ``lazy("...")`` stand-ins).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "dreamddp"

LAYERS = [
    {"checks", "atomic", "lazy", "provenance", "registry", "procs", "_compat", "netshape", "run.dist_env", "cpu_share", "clock", "speed",
     "run.failures", "faults", "run.preempt", "study"},
    {"comm"},
    {"engine"},
    {"schedule"},
    {"algorithms"},
    {"prediction"},
    {"models", "data"},
    {"warmup"},
    {"run.record", "run.wandb_log", "run.summary", "run.recorder", "run.checkpoint", "optim"},
    {"run.train"},
    {"config"},
    {"run.launch", "cli", "library", "schedule_cli", "sweep_filter", "planner"},
    {"reports"},
    {"bench"},  # the benchmark's jobs, then their reports
]
LAYER_OF = {name: i for i, layer in enumerate(LAYERS) for name in layer}


def _component(module: str) -> str:
    """``dreamddp.X...`` -> X; the run lifecycle package (dreamddp/run/) spans several
    layers, so each of its modules is a component of its own (``run.train``)."""
    parts = module.split(".")
    if len(parts) > 2 and parts[1] == "run" and parts[2] != "__init__":
        return f"run.{parts[2]}"
    return parts[1] if len(parts) > 1 else "dreamddp"


def _imports(path: Path) -> set[str]:
    source = path.read_text()
    found = set(re.findall(r'lazy\("(dreamddp[\w.]*)"\)', source))
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("dreamddp"):
            # ``from package import module`` imports the module
            found |= {f"{node.module}.{a.name}" if _is_module(f"{node.module}.{a.name}") else node.module
                      for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("dreamddp")}
    return found


def _is_module(dotted: str) -> bool:
    path = PACKAGE.parent.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts), path


def test_every_component_has_a_layer():
    components = {_component(m) for m, _ in _modules()} - {"__init__", "dreamddp", "run"}
    assert components <= set(LAYER_OF), sorted(components - set(LAYER_OF))


@pytest.mark.parametrize("module,path", list(_modules()), ids=[m for m, _ in _modules()])
def test_imports_go_downward_only(module, path):
    mine = _component(module)
    if mine not in LAYER_OF:
        return  # dreamddp/__init__.py, dreamddp/run/__init__.py
    for target in _imports(path):
        theirs = _component(target)
        if theirs in ("dreamddp", "run"):
            continue
        assert LAYER_OF[theirs] <= LAYER_OF[mine], f"{module} imports {target} (layer {theirs} is above {mine})"


@pytest.mark.parametrize("module", ["dreamddp.schedule_cli", "dreamddp.prediction", "dreamddp.algorithms",
                                    "dreamddp.schedule.simulator", "dreamddp.reports.tables"])
def test_planning_side_does_not_import_torch(module):
    code = f"import sys, {module}; sys.exit(int('torch' in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0, f"{module} imports torch"


def _import_graph() -> dict[str, set[str]]:
    """Module -> the dreamddp modules it imports (a package by its own name, not ``__init__``)."""
    name = lambda m: m.removesuffix(".__init__")  # noqa: E731
    return {name(m): {name(t) for t in _imports(path)} - {name(m)} for m, path in _modules()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (first module repeated at the end), or None: depth-first, each module once."""
    done, path = set(), []

    def visit(m):
        if m in path:
            return path[path.index(m):] + [m]
        if m in done or m not in graph:
            return None
        path.append(m)
        found = next((c for t in sorted(graph[m]) if (c := visit(t))), None)
        path.pop()
        done.add(m)
        return found

    return next((c for m in sorted(graph) if (c := visit(m))), None)


def test_no_import_cycles():
    cycle = _cycle(_import_graph())
    assert cycle is None, " -> ".join(cycle)
