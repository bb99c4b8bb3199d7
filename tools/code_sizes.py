"""Lines of the hubs that issue 16 tracks: `python tools/code_sizes.py`."""
import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HUBS = (("core/train.py", "Loop"), ("app/ui.py", "build_app"), ("app/ui.py", "TrainTab"), ("app/ui.py", "_lay_out_form"),
        ("app/sample_tab.py", "build"))


def span(path: str, name: str) -> int:
    """Lines from the definition of the class or function `name` in `path` to its end."""
    with open(os.path.join(ROOT, path)) as f:
        tree = ast.parse(f.read())
    return next(node.end_lineno - node.lineno + 1 for node in ast.walk(tree)
                if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name)


if __name__ == "__main__":
    for path, name in HUBS:
        print(f"{path} {name}: {span(path, name)} lines")
