"""tg.viz: the DOT text names every op and tensor of a graph, links them the way data flows, numbers
the ops in the order backward runs them, and save() renders with Graphviz or says how to."""
import os
import re
import shutil
import stat

import pytest

import tinygrad_gpu as tg
import tinygrad_gpu.nn.functional as F
from tinygrad_gpu import viz

NODE = re.compile(r'^\s*(\w+) \[shape=(\w+), label="((?:[^"\\]|\\.)*)"', re.MULTILINE)
EDGE = re.compile(r"^\s*(\w+) -> (\w+);", re.MULTILINE)


def parse(dot: str):
    """({name: (shape, label with real line breaks)}, [(source, target), ...]) of a DOT text."""
    assert dot.startswith("digraph") and dot.rstrip().endswith("}")
    nodes = {name: (shape, label.replace("\\n", "\n")) for name, shape, label in NODE.findall(dot)}
    edges = EDGE.findall(dot)
    assert all(a in nodes and b in nodes for a, b in edges), "an edge names a node that is not declared"
    return nodes, edges


def ops_by_label(nodes):
    return {label: name for name, (shape, label) in nodes.items() if shape == "ellipse"}


def inputs_of(name, edges):
    return [a for a, b in edges if b == name]


def outputs_of(name, edges):
    return [b for a, b in edges if a == name]


def test_small_graph_has_its_ops_tensors_and_edges():
    a = tg.ones(2, 3, requires_grad=True)
    b = tg.ones(3, requires_grad=True)
    nodes, edges = parse(viz.to_dot((a * b + a).sum()))
    ops = ops_by_label(nodes)
    assert sorted(ops) == ["add", "mul", "sum"]
    boxes = {name: label for name, (shape, label) in nodes.items() if shape == "box"}
    assert len(boxes) == 5           # a, b, a * b, a * b + a, the output: a, used twice, drawn once
    a_box, = [n for n, label in boxes.items() if label == "(2, 3) float32\nleaf, requires_grad"]
    b_box, = [n for n, label in boxes.items() if label == "(3,) float32\nleaf, requires_grad"]
    assert sorted(inputs_of(ops["mul"], edges)) == sorted([a_box, b_box])
    product, = outputs_of(ops["mul"], edges)
    assert boxes[product] == "(2, 3) float32"
    assert sorted(inputs_of(ops["add"], edges)) == sorted([product, a_box])
    total, = outputs_of(ops["add"], edges)
    assert inputs_of(ops["sum"], edges) == [total]
    out, = outputs_of(ops["sum"], edges)
    assert boxes[out] == "output\n() float32"
    assert len(edges) == 8


def test_numbers_are_the_order_backward_runs_the_ops():
    a = tg.tensor([0.5, 1.5], requires_grad=True)
    b = tg.tensor([2.0, 3.0], requires_grad=True)
    y = (a.exp() * b.sin() + a.tanh()).sum()      # branches: the order is the engine's choice, not obvious
    nodes, _ = parse(viz.to_dot(y, number_backward=True))
    numbered = sorted((int(label.split()[0][1:]), label.split()[1])
                      for shape, label in nodes.values() if shape == "ellipse")
    assert [n for n, _ in numbered] == list(range(1, 7))

    ran = []                            # record each backward as the engine calls it
    stack, seen = [y._ctx], set()
    while stack:
        node = stack.pop()
        if node is None or isinstance(node, tg.Tensor) or id(node) in seen:
            continue
        seen.add(id(node))
        node.backward = lambda grad, node=node: (ran.append(node.op_name()), type(node).backward(node, grad))[1]
        stack.extend(node.next_nodes)
    y.backward()
    assert [name for _, name in numbered] == ran


def test_tensors_without_grad_and_integer_tensors_are_drawn():
    logits = tg.zeros(4, 3, requires_grad=True)
    scale = tg.full((4, 3), 2.0)
    target = tg.tensor([0, 2, 1, 2])
    nodes, edges = parse(viz.to_dot(F.cross_entropy(logits * scale, target)))
    labels = [label for _, label in nodes.values()]
    assert "(4,) int64\nrequires_grad=False" in labels
    assert "(4, 3) float32\nrequires_grad=False" in labels
    mul = ops_by_label(nodes)["mul"]
    assert sorted(nodes[n][1] for n in inputs_of(mul, edges)) == [
        "(4, 3) float32\nleaf, requires_grad", "(4, 3) float32\nrequires_grad=False"]


def test_a_tensor_without_a_graph_is_one_box():
    nodes, edges = parse(viz.to_dot(tg.tensor([1, 2])))
    assert list(nodes.values()) == [("box", "output\n(2,) int64\nrequires_grad=False")] and edges == []
    nodes, _ = parse(viz.to_dot(tg.zeros(2, requires_grad=True)))
    assert list(nodes.values()) == [("box", "output\n(2,) float32\nleaf, requires_grad")]


def test_a_used_graph_can_still_be_drawn():
    a = tg.ones(2, requires_grad=True)
    y = (a * a).sum()
    before = viz.to_dot(y)
    y.backward()                        # frees what the nodes saved, not the graph's shape
    assert viz.to_dot(y) == before


def test_quotes_and_backslashes_in_labels_are_escaped(monkeypatch):
    a = tg.ones(2, requires_grad=True)
    y = a.exp()
    monkeypatch.setattr(type(y._ctx), "op_name", classmethod(lambda cls: 'say "hi" \\o/'))
    dot = viz.to_dot(y)
    assert 'label="say \\"hi\\" \\\\o/"' in dot
    nodes, _ = parse(dot)
    assert 'say \\"hi\\" \\\\o/' in [label for _, label in nodes.values()]


def test_save_without_graphviz_writes_dot_and_says_how_to_render(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    y = (tg.ones(2, requires_grad=True) * 3).sum()
    written = viz.save(y, tmp_path / "graph.svg", number_backward=True)
    assert written == tmp_path / "graph.dot" and not (tmp_path / "graph.svg").exists()
    assert written.read_text() == viz.to_dot(y, number_backward=True)
    message = capsys.readouterr().out
    assert f"dot -Tsvg {tmp_path / 'graph.dot'} -o {tmp_path / 'graph.svg'}" in message
    assert "Install Graphviz" in message


def test_save_hands_the_dot_text_and_format_to_graphviz(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "dot"              # records how it was called instead of drawing
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {tmp_path}/args\ncat > {tmp_path}/stdin\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", str(bin_dir) + os.pathsep + os.environ.get("PATH", ""))
    y = (tg.ones(2, requires_grad=True) * 3).sum()
    assert viz.save(y, tmp_path / "graph.png") == tmp_path / "graph.png"
    assert (tmp_path / "args").read_text().split("\n")[:3] == ["-Tpng", "-o", str(tmp_path / "graph.png")]
    assert (tmp_path / "stdin").read_text() == viz.to_dot(y)


def test_save_dot_file_and_bad_suffix(tmp_path):
    y = (tg.ones(2, requires_grad=True) * 3).sum()
    assert viz.save(y, tmp_path / "g.dot").read_text() == viz.to_dot(y)
    with pytest.raises(ValueError, match=r"viz\.save: cannot tell the format from 'g\.jpeg'"):
        viz.save(y, tmp_path / "g.jpeg")


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
def test_save_renders_svg_with_graphviz(tmp_path):
    y = (tg.ones(2, requires_grad=True) * 3).sum()
    written = viz.save(y, tmp_path / "graph.svg", number_backward=True)
    svg = written.read_text()
    assert written == tmp_path / "graph.svg" and "<svg" in svg and "#1 sum" in svg
