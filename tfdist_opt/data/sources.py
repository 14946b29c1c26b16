"""Input sources `build_dataset()` accepts, and record counting.

Pure Python (numpy at most): importing this module does not import
TensorFlow. Each source is a small frozen dataclass; `as_source()` turns the
plain forms users pass (a file pattern, numpy arrays, a function) into one.
"""

from __future__ import annotations

import dataclasses
import os
import struct
from typing import Any, Callable, Mapping

import numpy as np


@dataclasses.dataclass(frozen=True)
class TFRecordSource:
    """TFRecord files: a glob pattern, or a list of paths/patterns.

    Attributes:
        pattern: str or tuple of str. Matched with `tf.io.gfile.glob` and
            sorted, so every worker sees the same file list.
        compression_type: str or None. `None`/`""`, `"GZIP"` or `"ZLIB"`.
        examples_per_file: tuple of int or None. Records per file (in sorted
            order) when known; counted at build time otherwise.
    """

    pattern: str | tuple[str, ...]
    compression_type: str | None = None
    examples_per_file: tuple[int, ...] | None = None

    def __post_init__(self):
        patterns = (self.pattern,) if isinstance(self.pattern, str) else tuple(self.pattern)
        if not patterns or not all(isinstance(p, str) and p for p in patterns):
            raise ValueError(
                "Invalid value for `pattern`: expected a file pattern or a "
                f"non-empty list of them. Received: pattern={self.pattern!r}"
            )
        object.__setattr__(self, "pattern", patterns)
        if self.compression_type not in (None, "", "GZIP", "ZLIB"):
            raise ValueError(
                "Invalid value for `compression_type`: expected None, '', "
                f"'GZIP' or 'ZLIB'. Received: compression_type="
                f"{self.compression_type!r}"
            )
        if self.examples_per_file is not None:
            object.__setattr__(
                self, "examples_per_file", tuple(int(n) for n in self.examples_per_file)
            )


@dataclasses.dataclass(frozen=True)
class TFDSSource:
    """A TFDS dataset prepared in a local `data_dir`.

    Attributes:
        name: str. Registered dataset name, e.g. `"mnist"` or `"mnist:3.0.1"`.
        split: str. Split (or sub-split such as `"train[:10%]"`).
        data_dir: str or None. Where the prepared dataset lives. None: TFDS's
            default (`~/tensorflow_datasets` or `$TFDS_DATA_DIR`).
        download: bool. Download and prepare when missing. Off by default:
            nothing is fetched unless asked for.
        as_supervised: bool. `(input, label)` tuples instead of dicts.
        builder_kwargs: tuple of (key, value) pairs for `tfds.builder`.
    """

    name: str
    split: str = "train"
    data_dir: str | None = None
    download: bool = False
    as_supervised: bool = False
    builder_kwargs: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(
                "Invalid value for `name`: expected a TFDS dataset "
                f"name. Received: name={self.name!r}"
            )
        if isinstance(self.builder_kwargs, Mapping):
            object.__setattr__(self, "builder_kwargs", tuple(sorted(self.builder_kwargs.items())))


@dataclasses.dataclass(frozen=True, eq=False)
class ArraySource:
    """In-memory arrays: one array, a tuple of arrays, or a dict of them.

    Each worker slices its rows (`rows[worker::num_workers]`) in numpy before
    building its dataset, so no worker embeds the whole array in its graph.
    """

    arrays: Any

    def __post_init__(self):
        leaves = _leaves(self.arrays)
        if not leaves:
            raise ValueError(
                "Invalid value for `arrays`: expected at least one "
                "array. Received: arrays with no leaves"
            )
        lengths = {len(a) for a in leaves}
        if len(lengths) != 1:
            raise ValueError(
                "Invalid value for `arrays`: expected the same number of rows "
                f"in every array. Received: lengths {sorted(lengths)}"
            )

    @property
    def num_examples(self) -> int:
        return len(_leaves(self.arrays)[0])

    def rows(self, start: int, step: int) -> Any:
        """The arrays with rows `start::step`."""
        return _map_leaves(lambda a: a[start::step], self.arrays)


@dataclasses.dataclass(frozen=True, eq=False)
class DatasetFnSource:
    """A user `dataset_fn(input_context) -> tf.data.Dataset` of examples.

    The function returns *unbatched* examples that are already this worker's
    share (use `input_context.num_input_pipelines` / `input_pipeline_id`);
    the builder adds shuffling, mapping, batching and prefetching.

    Attributes:
        fn: callable. `fn(input_context) -> tf.data.Dataset`.
        examples_per_worker: int or None. Examples each worker's dataset
            holds. When given, every worker stops at the same step count;
            when None the builder cannot know, and says so in the log.
    """

    fn: Callable[[Any], Any]
    examples_per_worker: int | None = None

    def __post_init__(self):
        if not callable(self.fn):
            raise TypeError(
                "Invalid value for `fn`: expected a callable "
                f"dataset_fn(input_context). Received: {self.fn!r}"
            )


Source = TFRecordSource | TFDSSource | ArraySource | DatasetFnSource


def as_source(source: Any) -> Source:
    """Turns what a user passes into a source object.

    - a `*Source` object: as is;
    - a str, or a list/tuple of str: TFRecord file pattern(s);
    - a numpy array, or a tuple/dict of numpy arrays: `ArraySource`;
    - a callable: a `dataset_fn(input_context)`.

    Raises:
        TypeError: anything else (the message lists the accepted forms).
    """
    if isinstance(source, (TFRecordSource, TFDSSource, ArraySource, DatasetFnSource)):
        return source
    if isinstance(source, (str, os.PathLike)):
        return TFRecordSource(os.fspath(source))
    if (
        isinstance(source, (list, tuple))
        and source
        and all(isinstance(s, (str, os.PathLike)) for s in source)
    ):
        return TFRecordSource(tuple(os.fspath(s) for s in source))
    if isinstance(source, np.ndarray) or (
        isinstance(source, (tuple, dict))
        and source
        and all(isinstance(a, np.ndarray) for a in _leaves(source))
    ):
        return ArraySource(source)
    if callable(source):
        return DatasetFnSource(source)
    raise TypeError(
        "Unrecognized source for build_dataset. Received: "
        f"{type(source).__name__}. Expected one of: a TFRecord file pattern "
        "(str or list of str), numpy array(s) (array, tuple or dict), a "
        "dataset_fn(input_context), TFRecordSource, TFDSSource, ArraySource "
        "or DatasetFnSource."
    )


def count_tfrecords(path: str | os.PathLike) -> int:
    """Counts the records of an uncompressed local TFRecord file.

    Reads only each record's 12-byte header and seeks over its payload, so
    it costs one seek per record, not a read of the file.

    Raises:
        ValueError: the file ends inside a record (truncated or compressed).
    """
    count = 0
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        pos = 0
        while pos < size:
            header = f.read(12)
            if len(header) < 12:
                raise ValueError(
                    f"Invalid TFRecord file {path}: truncated record header at byte {pos}"
                )
            (length,) = struct.unpack("<Q", header[:8])
            pos += 12 + length + 4
            if pos > size:
                raise ValueError(
                    f"Invalid TFRecord file {path}: record {count} runs past the "
                    "end of the file (truncated, or compressed: pass "
                    "compression_type)"
                )
            f.seek(pos)
            count += 1
    return count


def _leaves(tree: Any) -> list[Any]:
    if isinstance(tree, dict):
        return [leaf for k in sorted(tree) for leaf in _leaves(tree[k])]
    if isinstance(tree, tuple):
        return [leaf for t in tree for leaf in _leaves(t)]
    return [tree]


def _map_leaves(fn: Callable[[Any], Any], tree: Any) -> Any:
    if isinstance(tree, dict):
        return {k: _map_leaves(fn, v) for k, v in tree.items()}
    if isinstance(tree, tuple):
        return tuple(_map_leaves(fn, t) for t in tree)
    return fn(tree)
