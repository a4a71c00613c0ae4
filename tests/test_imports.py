"""What imports what: the layers of the package, and an `import tinygrad_gpu` that compiles nothing.

Imports point downward (DESIGN.md): the ops never reach up into the engine that walks them,
the kernels know nothing of tensors, and the only import circle is tensor.py with the ops and
the engine it hands its methods over to (Tensor.backward, x + y, ...).
"""
import ast
import pathlib
import subprocess
import sys

import tinygrad_gpu

PACKAGE = pathlib.Path(tinygrad_gpu.__file__).parent


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict:
    """Each module of the package -> the package's modules it imports, anywhere in its text."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name in modules)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                for alias in node.names:       # `from pkg import module` names a module, else the package
                    found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
        graph[name] = {m for m in found if m in modules and m != name}
    return graph


def _reachable(graph, start) -> set:
    seen, stack = set(), [start]
    while stack:
        for nxt in graph[stack.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return seen


def test_no_op_imports_the_engine_and_the_kernels_import_no_tensors():
    graph = _imports()
    for name, imported in graph.items():
        if name.startswith("tinygrad_gpu.ops"):
            assert "tinygrad_gpu.autograd" not in imported, f"{name} imports the engine"
        if name.startswith("tinygrad_gpu.kernels"):
            assert not imported & {"tinygrad_gpu.tensor", "tinygrad_gpu.autograd"}, f"{name}: {imported}"
    below = {"tinygrad_gpu.tensor", "tinygrad_gpu.autograd"} | {m for m in graph if m.startswith("tinygrad_gpu.ops")}
    assert not graph["tinygrad_gpu.gradient_sums"] & below, "gradient_sums must sit below the ops and the engine"


def test_the_only_import_circle_is_tensor_its_ops_and_the_engine():
    graph = _imports()
    allowed = {"tinygrad_gpu.tensor", "tinygrad_gpu.autograd", "tinygrad_gpu.ops"}
    in_circles = {name for name in graph if name in _reachable(graph, name)}
    outside = {m for m in in_circles if m not in allowed and not m.startswith("tinygrad_gpu.ops.")}
    assert not outside, f"import circles through {sorted(outside)}"
    assert "tinygrad_gpu.tensor" in in_circles          # the one circle is still what it should be


def test_importing_the_package_loads_no_kernel_and_compiles_nothing():
    code = ("import sys, tinygrad_gpu; "
            "print(sorted(m for m in sys.modules if m.startswith('tinygrad_gpu.kernels.')))")
    env = {"PATH": "", "CXX": "/nonexistent/g++"}       # no compiler could run even if one were asked for
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True,
                         cwd=PACKAGE.parent)
    assert out.stdout.strip() == "['tinygrad_gpu.kernels.runtime']", out.stdout
