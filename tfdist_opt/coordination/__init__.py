"""In-worker coordination: what runs inside a training task, beside TF.

- `kv_store`: the coordination service's key-value store and barrier
  (`KeyValueStore`, `TFKeyValueStore`), injectable for tests;
- `startup_guard`: a deadline for multi-worker start-up that names the
  tasks that never came;
- `faults`: one line naming the lost peer when a collective fails;
- `watchdog`: a stdlib-only guard process that kills what a launch or a
  blocked start-up leaves behind;
- `task_env`: the names of the variables a launcher hands each task.

Layer: above `tfdist_opt.cluster` (cluster description), below the
training packages and `tfdist_opt.launch`. Nothing here imports the
launcher.
"""
