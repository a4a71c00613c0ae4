"""Draw the graph behind a tensor, as Graphviz's DOT text or a picture.

    import tinygrad_gpu as tg
    a = tg.randn(3, requires_grad=True)
    loss = (a * a + a).sum()
    print(tg.viz.to_dot(loss))                              # paste into any Graphviz viewer
    tg.viz.save(loss, "graph.svg", number_backward=True)    # needs Graphviz's `dot` program

The picture has two kinds of node: an ellipse per recorded op (a ``Function`` node: its
``op_name()``) and a box per tensor (shape and dtype; a leaf that requires grad says so,
and so does a tensor that carries no gradient). Arrows go the way data flows in the
forward pass: inputs -> op -> output. ``backward`` walks them the other way.

What the graph remembers is all there is to draw: each ``Function`` keeps where its
inputs came from (``next_nodes``: another Function, a leaf tensor that requires grad, or
None for a tensor that carries no gradient) and their shapes and dtypes (``input_shapes``,
``input_dtypes``). An intermediate tensor is not kept anywhere, so its box is drawn from
what its consumer recorded about it. A tensor that carries no gradient (a constant, an
integer target, anything made under ``no_grad``) is not linked to the graph at all, so it
gets a box of its own at each use.

``number_backward=True`` numbers the ops in the order ``backward`` runs their backward,
using the engine's own ordering (``autograd._topological_order``).
"""
from __future__ import annotations

import itertools
import shutil
import subprocess
from pathlib import Path

from .autograd import _topological_order
from .tensor import Tensor

RENDERED_FORMATS = (".svg", ".png", ".pdf")
INSTALL_HINT = ("Graphviz's `dot` program is not on PATH. Install Graphviz (apt-get install graphviz, "
                "brew install graphviz, conda install graphviz, or https://graphviz.org/download/), then run:\n"
                "    dot -T{fmt} {dot_path} -o {target}")


def _quoted(text: str) -> str:
    """A DOT string literal: backslashes and quotes escaped, line breaks as DOT's centred-line escape \\n."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + escaped.replace("\n", "\\n") + '"'


def _describe(shape, dtype) -> str:
    return f"{tuple(shape)} {dtype}"


def to_dot(tensor: Tensor, number_backward: bool = False) -> str:
    """Graphviz DOT text of the graph that computed `tensor` (ops as ellipses, tensors as boxes)."""
    order = _topological_order([tensor._ctx]) if tensor._ctx is not None else []
    ops = [node for node in order if not isinstance(node, Tensor)]   # the order backward visits them
    lines = ["digraph autograd {",
             '  node [fontname="Helvetica", fontsize=11];',
             "  edge [arrowsize=0.7];"]
    names = {}       # id(graph node) -> DOT name of the box of the tensor it stands for
    box_numbers = itertools.count()

    def add_tensor_box(label: str, key=None, output=False) -> str:
        name = f"t{next(box_numbers)}"
        style = ', style=filled, fillcolor="#dbe9f6"' if output else ""
        lines.append(f"  {name} [shape=box, label={_quoted(label)}{style}];")
        if key is not None:
            names[key] = name
        return name

    # The result: the one tensor the caller handed us, so its own dtype and leaf status are known.
    if tensor._ctx is None:
        leaf = "leaf, requires_grad" if tensor.requires_grad else "requires_grad=False"
        add_tensor_box(f"output\n{_describe(tensor.shape, tensor.dtype)}\n{leaf}", output=True)
    else:
        add_tensor_box(f"output\n{_describe(tensor.shape, tensor.dtype)}", key=id(tensor._ctx), output=True)

    for step, op in enumerate(ops, start=1):
        op_name = f"op{step}"
        label = f"#{step} {op.op_name()}" if number_backward else op.op_name()
        lines.append(f"  {op_name} [shape=ellipse, label={_quoted(label)}];")
        lines.append(f"  {op_name} -> {names[id(op)]};")
        for child, shape, dtype in zip(op.next_nodes, op.input_shapes, op.input_dtypes):
            if child is None:                                   # carries no gradient: not in the graph
                source = add_tensor_box(f"{_describe(shape, dtype)}\nrequires_grad=False")
            elif id(child) in names:                            # a tensor already drawn (used twice)
                source = names[id(child)]
            elif isinstance(child, Tensor):                     # a leaf that requires grad
                source = add_tensor_box(f"{_describe(shape, dtype)}\nleaf, requires_grad", key=id(child))
            else:                                               # the result of another op
                source = add_tensor_box(_describe(shape, dtype), key=id(child))
            lines.append(f"  {source} -> {op_name};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def save(tensor: Tensor, path, number_backward: bool = False) -> Path:
    """Write the graph of `tensor` to `path` and return the file written.

    ``.dot`` (or ``.gv``) writes the DOT text. ``.svg``, ``.png`` and ``.pdf`` are rendered by
    Graphviz's ``dot`` program; without it on PATH, the DOT text goes next to `path` (same
    name, ``.dot``) and a message says how to render it.
    """
    path = Path(path)
    text = to_dot(tensor, number_backward=number_backward)
    suffix = path.suffix.lower()
    if suffix not in RENDERED_FORMATS:
        if suffix not in (".dot", ".gv"):
            raise ValueError(f"viz.save: cannot tell the format from {path.name!r}; use a name ending in "
                             f".dot, .gv, {', '.join(RENDERED_FORMATS)}")
        path.write_text(text)
        return path
    dot = shutil.which("dot")
    if dot is None:
        dot_path = path.with_suffix(".dot")
        dot_path.write_text(text)
        print(INSTALL_HINT.format(fmt=suffix[1:], dot_path=dot_path, target=path))
        return dot_path
    subprocess.run([dot, f"-T{suffix[1:]}", "-o", str(path)], input=text, text=True, check=True)
    return path
