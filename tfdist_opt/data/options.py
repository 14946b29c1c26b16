"""`PipelineOptions`: one validated, frozen description of an input pipeline.

Pure Python: importing this module does not import TensorFlow. The builder
(`tfdist_opt.data.pipeline`) turns these fields into tf.data operations and a
`tf.data.Options`.

Sources and precedence, as for `StrategyConfig` (`tfdist_opt.config_files`):
field defaults < the `data` table of a JSON/TOML config file or preset <
`TFDIST_OPT_DATA_<FIELD>` environment variables < explicit keyword arguments.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Mapping

from tfdist_opt import config_files
from tfdist_opt import validation
from tfdist_opt.data import sharding

AUTO = "auto"
AUTOTUNE = "autotune"
CACHE_KINDS = ("none", "memory")  # or a file path prefix
CORRUPT_RECORDS = ("error", "skip")
ENV_PREFIX = config_files.ENV_PREFIX + "DATA_"


@dataclasses.dataclass(frozen=True)
class PipelineOptions(validation.ConfigFields):
    """How `build_dataset()` reads, shuffles, transforms and feeds data.

    Every field is validated on construction; a bad value raises a
    `ValueError` naming the field, the value received and what is allowed.

    Args:
        shard_policy: str. `"auto"` (FILE when files >= workers, else DATA),
            `"file"` (error when too few files), `"data"` or `"off"`.
            Defaults to `"auto"`.
        uneven: str. When shards hold different numbers of full steps:
            `"drop"` (every worker runs the smallest count; the rest is
            dropped and logged) or `"error"`. Defaults to `"drop"`.
        shuffle: bool. Shuffle examples (and file order, with FILE sharding).
            Defaults to `True`.
        shuffle_buffer: int or `"auto"`. Examples in the shuffle buffer;
            `"auto"` uses `sharding.shuffle_buffer_size`. Defaults to `"auto"`.
        seed: int or None. Shuffle seed; a seeded pipeline is reshuffled every
            epoch in the same sequence on every run. Defaults to `None`.
        reshuffle_each_iteration: bool. New order every epoch.
            Defaults to `True`.
        cache: str. `"none"`, `"memory"`, or a file path prefix (each worker
            appends `_worker<i>`). The cache holds examples after `map_fn`
            and before shuffling and `augment_fn`. Defaults to `"none"`.
        num_parallel_calls: int or `"autotune"`. Map parallelism.
            Defaults to `"autotune"`.
        cycle_length: int or `"autotune"`. Files read at once by the
            interleave. Defaults to `"autotune"`.
        prefetch: int or `"autotune"`. Host-side prefetch in batches; `0`
            turns it off. Defaults to `"autotune"`.
        device_prefetch: int or `"auto"`. Batches buffered per replica on
            its device (`InputOptions.experimental_per_replica_buffer_size`);
            `"auto"` is 2 where a GPU exists and TF's default 1 otherwise.
            Defaults to `"auto"`.
        private_threadpool_size: int. tf.data private thread pool (0: the
            shared pool). Defaults to `0`.
        autotune_ram_budget: int. Bytes the autotuner may use for buffers
            (0: TF's default, half the RAM). Defaults to `0`.
        deterministic: bool or None. Element order guarantee (None: TF's
            default, deterministic). `False` lets parallel stages reorder
            elements for speed. Defaults to `None`.
        corrupt_records: str. What a corrupt or truncated record in a
            TFRecord file does. `"error"`: the read fails with an error
            naming the file and how many of its records were read.
            `"skip"`: the record and the rest of its file are skipped (TF's
            reader cannot resume inside a file after a bad record), a line
            on stderr names the file and the number skipped, and records from
            a second pass over the worker's files fill the epoch so every
            worker still runs its planned steps. Defaults to `"error"`.
    """

    shard_policy: str = AUTO
    uneven: str = "drop"
    shuffle: bool = True
    shuffle_buffer: int | str = AUTO
    seed: int | None = None
    reshuffle_each_iteration: bool = True
    cache: str = "none"
    num_parallel_calls: int | str = AUTOTUNE
    cycle_length: int | str = AUTOTUNE
    prefetch: int | str = AUTOTUNE
    device_prefetch: int | str = AUTO
    private_threadpool_size: int = 0
    autotune_ram_budget: int = 0
    deterministic: bool | None = None
    corrupt_records: str = "error"

    def __post_init__(self):
        validation.check_choice("shard_policy", self.shard_policy, sharding.REQUESTS)
        validation.check_choice("uneven", self.uneven, sharding.UNEVEN)
        validation.check_bool("shuffle", self.shuffle)
        validation.check_int_or("shuffle_buffer", self.shuffle_buffer, AUTO, minimum=1)
        if self.seed is not None:
            validation.check_int("seed", self.seed, minimum=0)
        validation.check_bool("reshuffle_each_iteration", self.reshuffle_each_iteration)
        if not isinstance(self.cache, str) or not self.cache:
            raise ValueError(
                "Invalid value for `cache`: expected 'none', 'memory' or a "
                f"file path prefix. Received: cache={self.cache!r}"
            )
        validation.check_int_or("num_parallel_calls", self.num_parallel_calls, AUTOTUNE, minimum=1)
        validation.check_int_or("cycle_length", self.cycle_length, AUTOTUNE, minimum=1)
        validation.check_int_or("prefetch", self.prefetch, AUTOTUNE, minimum=0)
        validation.check_int_or("device_prefetch", self.device_prefetch, AUTO, minimum=1)
        validation.check_int("private_threadpool_size", self.private_threadpool_size, minimum=0)
        validation.check_int("autotune_ram_budget", self.autotune_ram_budget, minimum=0)
        if self.deterministic is not None:
            validation.check_bool("deterministic", self.deterministic)
        validation.check_choice("corrupt_records", self.corrupt_records, CORRUPT_RECORDS)

    @property
    def cache_kind(self) -> str:
        """`"none"`, `"memory"` or `"file"`."""
        return self.cache if self.cache in CACHE_KINDS else "file"

    @classmethod
    def load(
        cls,
        path: str | os.PathLike | None = None,
        environ: Mapping[str, str] | None = None,
        **overrides: Any,
    ) -> "PipelineOptions":
        """Merges defaults < the file's `data` table < `TFDIST_OPT_DATA_*` < keywords.

        `path` is a file or preset name (defaults to `$TFDIST_OPT_CONFIG`);
        `None` overrides are ignored, so absl flags left unset change nothing.

        Example:
            >>> PipelineOptions.load(environ={}, seed=3).seed
            3
        """
        return config_files.load(cls, path, environ, overrides, section="data", prefix=ENV_PREFIX)


def read_data_section(path: str | os.PathLike) -> dict[str, Any]:
    """The `data` table of a JSON or TOML file (empty when absent)."""
    return config_files.read_section(path, "data")
