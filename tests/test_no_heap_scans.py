"""No heap scans and no stack-frame walks anywhere in the package.

`gc.get_referrers` hands out objects still under construction (a SIGSEGV at
`strategy.scope()` exit in `benchmarks/allreduce.py`); `gc.get_objects`
broke a `tuple(generator)` another thread was filling. Models are known
where Keras builds them (`tfdist_opt.keras.model_registry`), and what
Keras keeps in `fit`'s locals is recorded by the model's own `fit`
(`tfdist_opt.runtime.FitCall`). Checked on the syntax tree, so prose that
names these calls is allowed.
"""

import ast

from tests import package_scan

# Names that are a heap scan or a frame walk wherever they appear.
ALWAYS = {
    "get_referrers",
    "get_referents",
    "get_objects",
    "_getframe",
    "currentframe",
    "f_back",
    "getouterframes",
    "getinnerframes",
    "f_locals",
    "tb_frame",
}
# Names that are one only as `inspect.<name>`.
OF_INSPECT = {"stack", "trace"}


def offences(source: str) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(source)):
        name = None
        if isinstance(node, ast.Attribute):
            if node.attr in ALWAYS or (
                node.attr in OF_INSPECT
                and isinstance(node.value, ast.Name)
                and node.value.id == "inspect"
            ):
                name = node.attr
        elif isinstance(node, ast.Name) and node.id in ALWAYS:
            name = node.id
        elif isinstance(node, ast.ImportFrom) and node.module in ("gc", "inspect", "sys"):
            name = next((a.name for a in node.names if a.name in ALWAYS | OF_INSPECT), None)
        elif isinstance(node, ast.Constant) and node.value in ALWAYS:
            name = node.value  # getattr(gc, "get_referrers")
        if name is not None:
            out.append(f"{node.lineno}: {name}")
    return out


def test_no_heap_scan_or_frame_walk_in_the_package():
    found = package_scan.offences_in_package(offences)
    assert not found, "\n".join(found)


def test_each_form_is_caught_and_prose_is_not():
    for text in (
        "gc.get_referrers(x)",
        "gc.get_objects()",
        "sys._getframe(1)",
        "inspect.currentframe()",
        "inspect.stack()",
        "f = f.f_back",
        "from gc import get_referrers",
        "from inspect import currentframe",
        "getattr(gc, 'get_objects')()",
        "tb.tb_frame.f_locals['self']",
    ):
        assert offences(text), text
    assert not offences('"""Not `gc.get_referrers`."""\nx = inspect.signature(f)\n')
