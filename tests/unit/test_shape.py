"""The codebase's shape, held by tests: no import circles between modules, and each concept
(datasets, presets, GAN types, each field's label, choices and range) declared once and read by
the page, the CLI's --help and validation alike."""
from __future__ import annotations

import ast
import os

from tests.apphelpers import ROOT


def _modules() -> dict[str, str]:
    found = {}
    for package in ("core", "app"):
        for folder, _, files in os.walk(os.path.join(ROOT, package)):
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    module = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                    found[module.removesuffix(".__init__")] = path
    return found


def _imports(path: str, modules: dict[str, str]) -> set[str]:
    """Every project module that `path` imports, at the top or inside a function."""
    named = set()
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                child = f"{node.module}.{alias.name}"
                named.add(child if child in modules else node.module)
        elif isinstance(node, ast.Import):
            named.update(alias.name for alias in node.names)
    return {name for name in named if name in modules}


def test_no_module_imports_itself_through_others():
    modules = _modules()
    graph = {name: _imports(path, modules) - {name} for name, path in modules.items()}
    circles = []

    def walk(name, path):
        for dep in sorted(graph[name]):
            if dep in path:
                circles.append(path[path.index(dep):] + [dep])
            elif dep not in done:
                walk(dep, path + [dep])
        done.add(name)
    done: set[str] = set()
    for name in sorted(graph):
        if name not in done:
            walk(name, [name])
    # A package's __init__ importing its own submodules is a package, not a circle.
    circles = [c for c in circles if not all(m == c[0] or m.startswith(c[0] + ".") for m in c)]
    assert circles == [], circles


def test_datasets_presets_and_gan_types_are_each_declared_once():
    from core import architecture, gans, losses
    from core.config import DATASETS, GANS, PRESETS, spec
    from core.data.sources import SOURCES
    assert tuple(SOURCES) == DATASETS == spec("dataset")["choices"]      # one row each, in the page's order
    # Each row names itself on the page (tests/unit/test_rows.py: the page's choices are the rows').
    assert len({source.label for source in SOURCES.values()}) == len(SOURCES)
    assert len({gan.label for gan in gans.GAN_TYPES}) == len(gans.GAN_TYPES)
    assert PRESETS == ("auto", *architecture.PRESET_WIDTH) == spec("preset")["choices"]
    assert GANS == ("auto", *(g.name for g in gans.GAN_TYPES)) == spec("gan")["choices"]
    assert all(hasattr(losses, g.loss) for g in gans.GAN_TYPES)


def test_the_cli_help_lists_every_fields_choices_and_range():
    from core.config import TrainConfig
    from core.train import _parser
    helps = {action.dest: action.help for action in _parser()._actions}
    for name, field in TrainConfig.__dataclass_fields__.items():
        meta = field.metadata
        assert helps[name].startswith(meta["help"].replace("%", "%%")), name
        assert all(choice in helps[name] for choice in meta["choices"]), name
        if meta["range"]:
            assert f"{meta['range'][0]:,}" in helps[name], name


DEVICE_LAYER = ("core.devices", "core.runtime")


def test_a_device_kind_is_named_in_comparisons_only_where_the_kinds_are_declared():
    """The device layer says what each kind is (is_xla, is_cpu, ...), and the plan decides with it;
    everything else asks them, so a new kind is added in one place."""
    from core.devices import KINDS

    def named_kinds(node) -> bool:
        values = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
        return any(isinstance(v, ast.Constant) and v.value in KINDS for v in values)
    found = []
    for module, path in _modules().items():
        if module in (*DEVICE_LAYER, "core.plan"):
            continue
        for node in ast.walk(ast.parse(open(path).read())):
            # torch.device(...).type == "cpu" is torch's own name of a device, not a Blink kind.
            torch_type = isinstance(node, ast.Compare) and isinstance(node.left, ast.Attribute) and node.left.attr == "type"
            if isinstance(node, ast.Compare) and not torch_type \
                    and any(named_kinds(side) for side in [node.left, *node.comparators]):
                found.append(f"{os.path.relpath(path, ROOT)}:{node.lineno}")
    assert not found, found


def test_only_the_device_layer_imports_torch_xla_and_only_inside_functions():
    """Importing any module starts no runtime, and a missing or broken torch_xla is a notice, not a crash."""
    found = []
    for module, path in _modules().items():
        tree = ast.parse(open(path).read())
        in_functions = {id(node) for function in ast.walk(tree)
                        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) for node in ast.walk(function)}
        for node in ast.walk(tree):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(name.split(".")[0] == "torch_xla" for name in names) \
                    and (module not in DEVICE_LAYER or id(node) not in in_functions):
                found.append(f"{os.path.relpath(path, ROOT)}:{node.lineno}")
    assert not found, found
