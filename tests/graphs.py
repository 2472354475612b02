"""Import-graph checks the structure tests share (not a test module)."""
from __future__ import annotations


def assert_acyclic(graph: dict[str, set[str]]) -> None:
    """No module of `graph` (module -> the modules it imports) reaches itself; the package's __init__, which
    re-exports, is no part of a circle."""
    graph = dict(graph, __init__=set())

    def visit(node, stack):
        for nxt in graph.get(node, ()):
            assert nxt not in stack, f"import circle: {' -> '.join(stack[stack.index(nxt):] + [nxt])}"
            visit(nxt, stack + [nxt])

    for m in graph:
        visit(m, [m])
