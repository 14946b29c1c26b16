"""Packaging for tfdist_opt."""

import pathlib
import re

import setuptools

_HERE = pathlib.Path(__file__).parent
_VERSION = re.search(
    r'^__version__ = "([^"]+)"',
    (_HERE / "tfdist_opt" / "__init__.py").read_text(),
    re.M,
).group(1)

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
    python_requires=">=3.10",
    install_requires=[
        "tensorflow==2.21.*",
        "tensorflow-datasets>=4.9",
        "importlib_resources",  # tfds download_and_prepare of local builders
        "absl-py>=2.0",
        "numpy>=1.26",
    ],
    extras_require={
        "test": [
            "pytest>=8",
            "pytest-timeout>=2.3",
            "tf-keras==2.21.*",
            "matplotlib>=3.8",
        ],
        "legacy": ["tf-keras==2.21.*"],
        "plot": ["matplotlib>=3.8"],
    },
    entry_points={"console_scripts": ["tfdist-opt=tfdist_opt.cli:main"]},
)
