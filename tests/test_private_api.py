"""Every private TF/Keras name in `tfdist_opt.private_api` still resolves."""

import pytest

from tfdist_opt import private_api


@pytest.mark.compat
def test_every_private_name_resolves():
    assert private_api.missing() == []


def test_a_missing_name_is_reported_with_its_reason(monkeypatch):
    gone = private_api.PrivateName(
        "keras.optimizers.SGD", "_no_such_attr", "tfdist_opt.x", "because upstream#1 has no hook"
    )
    no_module = private_api.PrivateName(
        "keras.no_such_module.Thing", "attr", "tfdist_opt.y", "why not"
    )
    with pytest.raises(AttributeError):
        private_api.resolve(gone)
    monkeypatch.setattr(private_api, "ENTRIES", private_api.ENTRIES + (gone, no_module))
    reported = private_api.missing()
    assert len(reported) == 2, reported
    assert reported[0].startswith(
        "keras.optimizers.SGD._no_such_attr (used in tfdist_opt.x: because "
        "upstream#1 has no hook): AttributeError: "
    ), reported[0]
    assert "_no_such_attr" in reported[0].split("AttributeError: ", 1)[1]
    assert reported[1].startswith(
        "keras.no_such_module.Thing.attr (used in tfdist_opt.y: why not): "
    ), reported[1]


@pytest.mark.compat
def test_instance_entries_are_checked_on_an_instance():
    entry = private_api.PrivateName(
        "keras.optimizers.SGD()", "_iterations", "tfdist_opt.x", "because"
    )
    assert private_api.resolve(entry) is not None


# ------------------------------------------------------------ the one seam
import ast  # noqa: E402
import pathlib  # noqa: E402

import tfdist_opt  # noqa: E402

PRIVATE_MODULES = ("keras.src", "tensorflow.python")
SEAM = "tfdist_opt/seam/"  # the manifest and the accessors
# Modules whose underscore names are documented Python API (`os._exit`,
# `sys._current_frames`), not TF/Keras internals.
STDLIB = {"os", "sys"}


def _trees():
    root = pathlib.Path(tfdist_opt.__file__).parent
    return {
        str(p.relative_to(root.parent)): ast.parse(p.read_text())
        for p in sorted(root.rglob("*.py"))
    }


def _is_private_module(name) -> bool:
    return isinstance(name, str) and any(
        name == m or name.startswith(m + ".") for m in PRIVATE_MODULES
    )


def private_imports(tree) -> list[str]:
    """Lines importing `keras.src` / `tensorflow.python` (also by string)."""
    out = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            names = [node.args[0].value]  # importlib.import_module("keras.src...")
        out += [f"{node.lineno}: {n}" for n in names if _is_private_module(n)]
    return out


def _defined_names(trees) -> set[str]:
    """Every name the package itself defines (its own `_private` names)."""
    names = set()
    for tree in trees.values():
        for n in ast.walk(tree):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(n.name)
            elif isinstance(n, ast.arg):
                names.add(n.arg)
            elif isinstance(n, ast.keyword) and n.arg:
                names.add(n.arg)
            elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                names.add(n.id)
            elif isinstance(n, ast.Attribute) and isinstance(n.ctx, (ast.Store, ast.Del)):
                names.add(n.attr)
            elif isinstance(n, ast.alias):
                names.add(n.asname or n.name.split(".")[-1])
            elif (
                isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.isidentifier()
            ):
                names.add(n.value)  # getattr/setattr/vars() keys of our own
    return names


def _listed_names() -> set[str]:
    names = set()
    for e in private_api.ENTRIES:
        names.update(e.attr.split("."))
    return names


def unlisted_private_names(tree, known) -> list[str]:
    """`obj._name` reads of a name neither the package defines nor the manifest lists."""
    out = []
    for n in ast.walk(tree):
        if (
            isinstance(n, ast.Attribute)
            and isinstance(n.ctx, ast.Load)
            and n.attr.startswith("_")
            and not n.attr.startswith("__")
            and n.attr not in known
            and not (isinstance(n.value, ast.Name) and n.value.id in STDLIB)
        ):
            out.append(f"{n.lineno}: {n.attr}")
    return out


def test_only_the_seam_imports_keras_src_or_tensorflow_python():
    found = [
        f"{path}:{line}"
        for path, tree in _trees().items()
        if not path.startswith(SEAM)
        for line in private_imports(tree)
    ]
    assert not found, "\n".join(found)


def test_every_private_name_read_is_in_the_manifest():
    trees = _trees()
    known = _defined_names(trees) | _listed_names()
    found = [
        f"{path}:{line}"
        for path, tree in trees.items()
        if not path.startswith(SEAM)
        for line in unlisted_private_names(tree, known)
    ]
    assert not found, "\n".join(found)


def test_seam_checks_catch_each_form():
    for text in (
        "from keras.src.utils import file_utils",
        "import tensorflow.python.eager.context",
        "from tensorflow.python import tf2",
        "importlib.import_module('keras.src.trainers')",
    ):
        assert private_imports(ast.parse(text)), text
    assert not private_imports(ast.parse("import keras\nfrom tensorflow import keras"))
    tree = ast.parse("opt._secret_slots\nos._exit(1)\nself._mine\nopt._iterations")
    assert unlisted_private_names(tree, {"_mine", "_iterations"}) == ["1: _secret_slots"]
