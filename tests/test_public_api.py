"""The public API: every exported name resolves, and importing is TF-free."""

import subprocess
import sys

import tfdist_opt
from tests.multiworker.harness import REPO_ROOT


def test_every_exported_name_resolves():
    for name in tfdist_opt.__all__:
        assert getattr(tfdist_opt, name) is not None, name
    assert sorted(tfdist_opt.__all__) == tfdist_opt.__all__


def test_import_does_not_load_tensorflow():
    code = (
        "import sys, tfdist_opt, tfdist_opt.cluster, tfdist_opt.data, "
        "tfdist_opt.gradients, tfdist_opt.callbacks, tfdist_opt.model_parallel; "
        "tfdist_opt.StrategyConfig.load(environ={}); "
        "print('tensorflow' in sys.modules)"
    )
    p = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "False"


def test_model_parallel_names_resolve():
    from tfdist_opt import model_parallel

    for name in model_parallel.__all__:
        assert getattr(model_parallel, name) is not None, name
    assert sorted(model_parallel.__all__) == model_parallel.__all__
    assert callable(model_parallel.pipeline)  # the function, not a module
