"""The build step pyproject.toml cannot declare: configs/ and benchmarks/ in the wheel.

Every setting (name, version, requirements, extras, console script) is in
pyproject.toml; this file only adds `_BuildPyWithData` as `build_py`.
"""

import pathlib

import setuptools
from setuptools.command.build_py import build_py

_HERE = pathlib.Path(__file__).parent

# Top-level folders shipped inside the wheel as tfdist_opt/_data/<folder>/
# (found by tfdist_opt/resources.py): folder -> file patterns.
_SHIPPED = {"configs": ("*.json", "*.toml"), "benchmarks": ("*.py", "train_lib/*.py")}


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
                raise FileNotFoundError(
                    f"setup.py: nothing to ship in {folder}/ (expected {', '.join(patterns)})."
                )
            for src in files:
                target = dest / src.relative_to(_HERE / folder)
                if write:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    self.copy_file(str(src), str(target))
                out.append(str(target))
            if folder == "benchmarks":
                init = dest / "__init__.py"
                if write:
                    init.write_text(
                        '"""tfdist_opt benchmark binaries (copied '
                        'from the repository\'s benchmarks/)."""\n'
                    )
                out.append(str(init))
        return out


setuptools.setup(cmdclass={"build_py": _BuildPyWithData})
