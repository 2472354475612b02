"""A tiny integer-expression evaluator for manifest fields such as dynamic shared memory.

Only integer literals, names from a given table and + - * // ( ) are allowed, so a manifest can never
run code; the text is bounded in length, nesting depth and literal digits, so that a hostile or broken
manifest is refused with a message instead of exhausting the parser.
"""
import ast
import operator

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv}
MAX_CHARS = 2000  # the longest declared expression is under 100
MAX_DEPTH = 50  # nested operations / parentheses
MAX_DIGITS = 40  # an integer literal's digits


def _shown(expr: str) -> str:
    return repr(expr) if len(expr) <= 60 else repr(expr[:57] + "...")


def eval_int_expr(expr: "int | str", names: "dict[str, int]") -> int:
    if isinstance(expr, int) and not isinstance(expr, bool):
        return expr
    text = str(expr)
    if len(text) > MAX_CHARS:
        raise ValueError(f"expression of {len(text)} characters (at most {MAX_CHARS}): {_shown(text)}")
    if text.count("(") > MAX_DEPTH:
        raise ValueError(f"expression nested deeper than {MAX_DEPTH} parentheses: {_shown(text)}")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise ValueError(f"cannot parse expression {_shown(text)}: {getattr(exc, 'msg', exc)}") from None

    def ev(node: ast.AST, depth: int) -> int:
        if depth > MAX_DEPTH:
            raise ValueError(f"expression nested deeper than {MAX_DEPTH} operations: {_shown(text)}")
        if isinstance(node, ast.Expression):
            return ev(node.body, depth + 1)
        if isinstance(node, ast.Constant) and type(node.value) is int:
            if node.value >= 10 ** MAX_DIGITS:
                raise ValueError(f"integer literal of more than {MAX_DIGITS} digits in {_shown(text)}")
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in names:
                raise ValueError(f"unknown name {node.id!r} in {_shown(text)}; known: {sorted(names)}")
            return int(names[node.id])
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left, depth + 1), ev(node.right, depth + 1))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand, depth + 1)
        raise ValueError(f"unsupported element {type(node).__name__} in expression {_shown(text)}")

    try:
        return ev(tree, 0)
    except (ZeroDivisionError, RecursionError) as exc:
        raise ValueError(f"cannot evaluate {_shown(text)}: {exc}") from None
