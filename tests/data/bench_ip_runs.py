"""Runs benchmarks/input_pipeline.py several times in one process.

usage: bench_ip_runs.py RUNS_JSON  (a JSON list of argument lists)

Each run goes through `absl.app.run(main)` as the binary does, with its flags
parsed afresh; before it, `RUN <i>` is printed, after it `EXIT <i> <code>`.
One TensorFlow start-up serves every run (tests/data/test_bench_input_pipeline.py).
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from absl import app  # noqa: E402
from absl import flags  # noqa: E402

from benchmarks import input_pipeline  # noqa: E402


def main(argv):
    # benchmarks.common.flag_config() reports the flags registered under
    # sys.argv[0] (absl's key for `__main__`); imported, the binary's flags
    # are keyed by its module name.
    sys.argv[0] = input_pipeline.__name__
    for i, args in enumerate(json.loads(argv[1])):
        print(f"RUN {i}", flush=True)
        flags.FLAGS.unparse_flags()
        code = 0
        try:
            app.run(input_pipeline.main, argv=[input_pipeline.__file__, *args])
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        sys.stderr.flush()
        print(f"EXIT {i} {code}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
