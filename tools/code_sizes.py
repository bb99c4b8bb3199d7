"""Lines of the hubs that issue 16 tracks: `python tools/code_sizes.py`.

For a class, also its largest method: a class of small methods is not a hub, one long method is."""
import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HUBS = (("core/train.py", "Loop"), ("app/ui.py", "build_app"), ("app/ui.py", "TrainTab"), ("app/sample_tab.py", "SampleTab"))


def lines(node: ast.AST) -> int:
    return node.end_lineno - node.lineno + 1


def find(path: str, name: str) -> ast.AST:
    """The definition of the class or function `name` in `path`."""
    with open(os.path.join(ROOT, path)) as f:
        tree = ast.parse(f.read())
    return next(node for node in ast.walk(tree)
                if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name)


def size_line(path: str, name: str) -> str:
    """Lines from the definition of `name` to its end (and, for a class, its largest method's)."""
    node = find(path, name)
    text = f"{path} {name}: {lines(node)} lines"
    methods = [m for m in node.body if isinstance(m, ast.FunctionDef)] if isinstance(node, ast.ClassDef) else []
    if methods:
        largest = max(methods, key=lines)
        text += f", {len(methods)} methods, largest {largest.name}: {lines(largest)} lines"
    return text


if __name__ == "__main__":
    for path, name in HUBS:
        print(size_line(path, name))
