"""Every private TF/Keras name tfdist_opt relies on, and the one way to reach it.

The public path of `tfdist_opt.seam`: its manifest (`PrivateName`,
`ENTRIES`, `resolve`, `missing`: `tfdist_opt.seam.manifest`, each name with
its upstream reason) and its accessors (`tfdist_opt.seam.access`, which
holds the package's only `keras.src` / `tensorflow.python` imports).
Modules outside the seam import this module, never those packages.
"""

from __future__ import annotations

from tfdist_opt.seam import manifest as _manifest
from tfdist_opt.seam.access import (  # noqa: F401
    tf_optimizer_class,
    reduce_per_replica,
    generator_data_adapter_class,
    make_class_weight_map_fn,
    file_exists,
    collective_all_reduce_extended_class,
    eager_context_module,
    set_recv_buf_max_chunk,
    tf_errors_module,
    name_scope_stack,
    set_name_scope_stack,
    distributed_dataset_of,
    initial_epoch,
    clear_epoch_length,
)
from tfdist_opt.seam.manifest import (  # noqa: F401
    CHECKED_VERSIONS,
    ENTRIES,
    TF_OPTIMIZER,
    PrivateName,
    resolve,
)


def missing() -> list[str]:
    """One line per `ENTRIES` entry that no longer resolves (empty when all do)."""
    return _manifest.missing(ENTRIES)
