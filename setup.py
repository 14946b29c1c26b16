"""Packaging for tfdist_opt."""

import pathlib
import re

import setuptools
from setuptools.command.build_py import build_py

_HERE = pathlib.Path(__file__).parent
_VERSION = re.search(
    r'^__version__ = "([^"]+)"',
    (_HERE / "tfdist_opt" / "__init__.py").read_text(),
    re.M,
).group(1)

# Versions a test has run on (tests/test_versions.py reads this table back
# from tfdist_opt/versions.py, so the two cannot drift apart).
_TF = "tensorflow==2.21.*"
_KERAS = "keras==3.15.*"
_TF_KERAS = "tf-keras==2.21.*"
_TENSORBOARD = "tensorboard==2.21.*"
_RAY_TRAIN = "ray[train]==2.60.*"  # Ray Train V2 (TensorflowTrainer)

# Top-level folders shipped inside the wheel as tfdist_opt/_data/<folder>/
# (found by tfdist_opt/resources.py): folder -> file patterns.
_SHIPPED = {"configs": ("*.json", "*.toml"),
            "benchmarks": ("*.py", "train_lib/*.py")}


class _BuildPyWithData(build_py):
    """build_py, plus copies of configs/ and benchmarks/ from the checkout.

    The repository's folders stay the only copy in git; the wheel gets
    them at build time. benchmarks/ gains an empty `__init__.py` there so
    its `from benchmarks import common` finds this copy first.
    """

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads the checkout's folders
        self._data_outputs(write=True)

    def get_outputs(self, include_bytecode=1):
        outputs = super().get_outputs(include_bytecode)
        if getattr(self, "editable_mode", False):
            return outputs
        return outputs + self._data_outputs()

    def _data_outputs(self, write=False):
        out = []
        for folder, patterns in _SHIPPED.items():
            dest = pathlib.Path(self.build_lib) / "tfdist_opt" / "_data" / folder
            files = sorted({p for pat in patterns for p in (_HERE / folder).glob(pat)})
            if not files:
                raise FileNotFoundError(f"setup.py: nothing to ship in {folder}/ "
                                        f"(expected {', '.join(patterns)}).")
            for src in files:
                target = dest / src.relative_to(_HERE / folder)
                if write:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    self.copy_file(str(src), str(target))
                out.append(str(target))
            if folder == "benchmarks":
                init = dest / "__init__.py"
                if write:
                    init.write_text('"""tfdist_opt benchmark binaries (copied '
                                    'from the repository\'s benchmarks/)."""\n')
                out.append(str(init))
        return out


setuptools.setup(
    name="tfdist_opt",
    version=_VERSION,
    description=(
        "Fast, painless TensorFlow data-parallel training: Keras-3-safe "
        "tf.distribute strategies, launcher, pipelines, callbacks, benchmarks."
    ),
    long_description=(_HERE / "README.md").read_text(),
    long_description_content_type="text/markdown",
    packages=setuptools.find_packages(include=["tfdist_opt", "tfdist_opt.*"]),
    python_requires=">=3.11",  # tomllib
    install_requires=[
        _TF,
        _KERAS,
        "tensorflow-datasets>=4.9",
        "importlib_resources",  # tfds download_and_prepare of local builders
        "absl-py>=2.0",
        "numpy>=1.26",
        # TensorFlow asks for ml_dtypes>=0.5.1,<1. With numpy 2.4, importing
        # ml_dtypes 0.7.0 takes 0.55-0.6 s (numpy's PyUFunc_AddLoop scans the
        # loops registered so far for each new one, and 0.7 registers many
        # more): 0.06 s with 0.6.0. TensorFlow imports it in every process,
        # so every worker, restart and tool start pays it.
        "ml_dtypes>=0.5.1,<0.7",
    ],
    extras_require={
        "test": [
            "pytest>=8",
            "pytest-timeout>=2.3",
            "pytest-xdist>=3.5",  # pytest.ini's `-n 2`
            _TF_KERAS,
            _TENSORBOARD,
            "matplotlib>=3.8",
            "pyyaml>=6",  # tests read `tfdist-opt k8s` manifests back
            # tests/docs builds the site with `mkdocs build --strict`.
            "mkdocs==1.6.1",
            "mkdocs-material==9.8.2",
            "mkdocstrings[python]==1.0.8",
            "mkdocstrings-python==2.0.11",
            _RAY_TRAIN,  # Ray tests: the Ray Train backend, launch --ray
        ],
        "legacy": [_TF_KERAS],
        "ray": [_RAY_TRAIN],
        "plot": ["matplotlib>=3.8"],
        "tensorboard": [_TENSORBOARD],
    },
    cmdclass={"build_py": _BuildPyWithData},
    entry_points={"console_scripts": ["tfdist-opt=tfdist_opt.cli:main"]},
)
