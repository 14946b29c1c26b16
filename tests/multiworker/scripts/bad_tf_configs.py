"""Calls `tfdist_opt.opt_strategy()` once per bad TF_CONFIG, in one process.

usage: bad_tf_configs.py CONFIGS_JSON (a JSON list of TF_CONFIG strings)

For each, sets TF_CONFIG and prints `RESULT {"case", "error", "seconds"}`
with the error it raised. Each must raise before any server starts, so the
next case runs in a clean process; one that returns a strategy instead
prints `"error": null` and ends the process (exit code 3).
"""

import importlib
import json
import os
import sys
import time

import tfdist_opt

# TensorFlow loaded up front, so "seconds" times the check alone.
importlib.import_module("tensorflow")


def main(argv):
    for i, tf_config in enumerate(json.loads(argv[1])):
        os.environ["TF_CONFIG"] = tf_config
        t0 = time.monotonic()
        try:
            tfdist_opt.opt_strategy()
        except Exception as e:  # pylint: disable=broad-except
            print(
                "RESULT "
                + json.dumps(
                    {
                        "case": i,
                        "error": f"{type(e).__name__}: {e}",
                        "seconds": time.monotonic() - t0,
                    }
                ),
                flush=True,
            )
            continue
        print("RESULT " + json.dumps({"case": i, "error": None}), flush=True)
        os._exit(3)  # a strategy (and maybe a server) exists: stop here
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
