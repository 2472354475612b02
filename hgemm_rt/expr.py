"""A tiny integer-expression evaluator for manifest fields such as dynamic shared memory.

Only integer literals, names from a given table and + - * // ( ) are allowed, so a manifest can never
run code.
"""
import ast
import operator

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv}


def eval_int_expr(expr: "int | str", names: "dict[str, int]") -> int:
    if isinstance(expr, int):
        return expr
    try:
        tree = ast.parse(str(expr), mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"cannot parse expression {expr!r}: {exc.msg}") from None

    def ev(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in names:
                raise ValueError(f"unknown name {node.id!r} in {expr!r}; known: {sorted(names)}")
            return int(names[node.id])
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        raise ValueError(f"unsupported element {ast.dump(node)} in expression {expr!r}")

    try:
        return ev(tree)
    except (ZeroDivisionError, RecursionError) as exc:
        raise ValueError(f"cannot evaluate {expr!r}: {exc}") from None
