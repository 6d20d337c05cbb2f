"""No module of the Flower app patches Flower: nothing under ``src/fedtopic_pipelines/flower/``
assigns to (or ``setattr``s, or ``del``s) an attribute of anything imported from ``flwr``.

A static check: in each module, the names bound by ``import flwr...`` / ``from flwr... import
...`` (at any level, function-local imports included) are Flower objects; an assignment,
augmented assignment, annotated assignment, ``del`` or ``setattr``/``delattr`` whose target
object is such a name, or an attribute chain or subscript rooted at one, is a patch.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

FLOWER_APP = Path(__file__).resolve().parents[2] / "src" / "fedtopic_pipelines" / "flower"


def flower_names(tree: ast.AST) -> set[str]:
    """Names a module binds to Flower modules or objects by importing them."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "flwr" or alias.name.startswith("flwr."):
                    names.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "flwr":
            names.update(alias.asname or alias.name for alias in node.names)
    return names


def _root(node: ast.expr) -> str | None:
    """The name an attribute chain or subscript starts from (``a`` in ``a.b[c].d``)."""
    while isinstance(node, ast.Attribute | ast.Subscript):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        return list(node.targets)
    if isinstance(node, ast.AugAssign | ast.AnnAssign):
        return [node.target]
    if isinstance(node, ast.Delete):
        return list(node.targets)
    return []


def _flatten(targets: list[ast.expr]) -> list[ast.expr]:
    out = []
    for target in targets:
        if isinstance(target, ast.Tuple | ast.List):
            out.extend(_flatten(list(target.elts)))
        elif isinstance(target, ast.Starred):
            out.extend(_flatten([target.value]))
        else:
            out.append(target)
    return out


def patches(source: str, filename: str = "<module>") -> list[str]:
    """Each place in ``source`` that changes an attribute (or item) of a Flower object, as 'file:line: code'."""
    tree = ast.parse(source, filename)
    flower = flower_names(tree)
    found = []
    for node in ast.walk(tree):
        objects = [t for t in _flatten(_targets(node)) if isinstance(t, ast.Attribute | ast.Subscript)]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr"):
            objects += node.args[:1]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "__setattr__":
            objects.append(node.func.value)
        for target in objects:
            if _root(target) in flower:
                found.append(f"{filename}:{node.lineno}: {ast.unparse(node).splitlines()[0]}")
                break
    return found


def test_no_module_of_the_flower_app_patches_flower() -> None:
    modules = sorted(FLOWER_APP.glob("**/*.py"))
    assert len(modules) >= 5, f"no modules found under {FLOWER_APP}"
    found = [p for module in modules for p in patches(module.read_text(), str(module.relative_to(FLOWER_APP)))]
    assert found == [], "modules of the Flower app patch Flower:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "source",
    [
        "import flwr.supernode.start_client_internal as loop\nloop.time = None",
        "from flwr.supernode import start_client_internal\nstart_client_internal.time.sleep = print",
        "import flwr\nflwr.superlink.grid.http_grid.pull_objects = None",
        "from flwr.supercore.inflatable import inflatable_utils as iu\niu.PULL_INITIAL_BACKOFF += 1",
        "from flwr.supercore.task_identity import TaskIdentity\nTaskIdentity.run_id, x = 1, 2",
        "from flwr.supercore import constant\nconstant.__dict__['PULL_MAX_TIME'] = 1",
        "import flwr.superlink.grid.http_grid as g\nsetattr(g, 'pull_objects', None)",
        "from flwr.app import Message\ndel Message.metadata",
        "def f():\n    from flwr.serverapp import grid\n    grid.Grid.x: int = 1",
    ],
)
def test_the_check_finds_a_patch(source: str) -> None:
    assert len(patches(source)) == 1, source


@pytest.mark.parametrize(
    "source",
    [
        "from flwr.app import Message\nm = Message\nx = Message(None)",  # binding names is not patching
        "from flwr.app import Message\ndef f(message):\n    message.metadata.__dict__['_message_id'] = 'x'",
        "import flwr\nfrom fedtopic import thing\nthing.value = flwr.__version__",
        "import os\nos.environ['X'] = '1'",
    ],
)
def test_the_check_leaves_ordinary_code_alone(source: str) -> None:
    assert patches(source) == [], source
