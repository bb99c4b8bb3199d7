"""The longest classes and functions of the product's code (app.py, app/, core/), longest first:
`python tools/code_sizes.py [N]` (N of each, default 10).

For a class, also its largest method: a class of small methods is not a hub, one long method is."""
import ast
import glob
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCES = ("app.py", "app/*.py", "core/*.py", "core/data/*.py")


def lines(node: ast.AST) -> int:
    return node.end_lineno - node.lineno + 1


def definitions() -> list[tuple[str, ast.AST]]:
    """(path, node) of every class and function (methods included) in the product's modules."""
    found = []
    for pattern in SOURCES:
        for path in sorted(glob.glob(os.path.join(ROOT, pattern))):
            with open(path) as f:
                tree = ast.parse(f.read())
            found += [(os.path.relpath(path, ROOT), node) for node in ast.walk(tree)
                      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    return found


def size_line(path: str, node: ast.AST) -> str:
    text = f"{lines(node):4d}  {path} {node.name}"
    methods = [m for m in node.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))] \
        if isinstance(node, ast.ClassDef) else []
    if methods:
        largest = max(methods, key=lines)
        text += f" ({len(methods)} methods, largest {largest.name}: {lines(largest)})"
    return text


def main(top: int = 10) -> None:
    found = definitions()
    for title, kind in (("classes", ast.ClassDef), ("functions and methods", (ast.FunctionDef, ast.AsyncFunctionDef))):
        print(f"The {top} longest {title}:")
        for path, node in sorted((d for d in found if isinstance(d[1], kind)), key=lambda d: -lines(d[1]))[:top]:
            print(size_line(path, node))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10)
