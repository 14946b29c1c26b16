"""`python -m tests.slurm.weights DIR`: a digest of the newest backup in DIR.

Prints the sha256 (first 16 hex digits) of the model's weights and the
optimizer's variables in the backup `DistributedBackupAndRestore` last
completed (`latest.json`), and its step: two runs trained alike print the
same line.
"""

import hashlib
import json
import os
import sys


def main(backup_dir: str) -> int:
    import tensorflow as tf

    with open(os.path.join(backup_dir, "latest.json")) as f:
        latest = json.load(f)
    reader = tf.train.load_checkpoint(os.path.join(backup_dir, latest["name"], "state"))
    keys = sorted(
        k for k in reader.get_variable_to_shape_map() if k.startswith(("weights/", "optimizer/"))
    )
    digest = hashlib.sha256()
    for k in keys:
        digest.update(k.encode() + reader.get_tensor(k).tobytes())
    print(f"step {latest['step']} variables {len(keys)} sha256 {digest.hexdigest()[:16]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
