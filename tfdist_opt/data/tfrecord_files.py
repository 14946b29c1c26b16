"""Reading one TFRecord file so that a corrupt record names its file.

TF's `TFRecordDataset` fails a corrupt record with `DataLossError:
corrupted record at 312`, which names no file; inside `fit` under a
parallel interleave of many files the user cannot tell which one. TF's
reader cannot resynchronise after a bad record either: on any error other
than end-of-file it moves on to its next file (tensorflow/core/kernels/
data/tf_record_dataset_op.cc, "so that it works with ignore_errors"), so
what follows a corrupt record in that file is lost in any case.

`read_file(path, expected, ...)` reads one file with `ignore_errors` and
compares the records read with `expected` (the header count
`count_records` found, which does not check payload CRCs) when the file
ends:

- `on_corrupt="error"`: fewer records raise `InvalidArgumentError` whose
  message names the file and both counts (TF's own message is logged as a
  warning just before);
- `on_corrupt="skip"`: the file's remaining records are dropped and one
  line per file read (`tf.print` to stderr, from inside the pipeline) says
  how many and where.

Cost: no per-record Python or tf.function call. Records are zipped with a
constant flag (a sentinel ends each file), enumerated and batched per file;
one small function per batch of `CHUNK` records checks the count and drops
the sentinel; `unbatch` restores single records.
"""

from __future__ import annotations

import sys

import tensorflow as tf

from tfdist_opt.data.options import CORRUPT_RECORDS

CHUNK = 256


def read_file(
    path: tf.Tensor, expected: tf.Tensor, compression_type: str = "", on_corrupt: str = "error"
) -> tf.data.Dataset:
    """Records of one TFRecord file, checked against its expected count.

    Args:
        path: scalar string tensor. The file.
        expected: scalar int64 tensor. Records its headers hold.
        compression_type: str. `""`, `"ZLIB"` or `"GZIP"`.
        on_corrupt: str. `"error"` or `"skip"` (see the module docstring).

    Returns:
        A `tf.data.Dataset` of serialized records.
    """
    if on_corrupt not in CORRUPT_RECORDS:
        raise ValueError(
            f"Invalid value for `corrupt_records`: expected one of "
            f"{CORRUPT_RECORDS}. Received: corrupt_records={on_corrupt!r}"
        )
    records = tf.data.TFRecordDataset(path, compression_type=compression_type)
    records = records.ignore_errors(log_warning=on_corrupt == "error")
    flagged = tf.data.Dataset.zip((records, tf.data.Dataset.from_tensors(False).repeat()))
    sentinel = tf.data.Dataset.from_tensors((tf.constant(b""), True))
    indexed = flagged.concatenate(sentinel).enumerate().batch(CHUNK)
    expected = tf.cast(expected, tf.int64)

    def check(index, batch):
        record, is_end = batch
        ended = tf.reduce_any(is_end)
        # The sentinel's index is the number of records read.
        read = tf.reduce_max(tf.where(is_end, index, -1))
        missing = tf.where(ended, expected - read, 0)
        if on_corrupt == "error":
            done = tf.debugging.Assert(
                missing <= 0,
                [
                    "tfdist_opt.data: corrupt TFRecord file",
                    path,
                    "read",
                    read,
                    "of",
                    expected,
                    "records (a corrupt or truncated record, or a "
                    "wrong examples_per_file); set "
                    "PipelineOptions(corrupt_records='skip') to skip it",
                ],
                summarize=1,
            )
        else:
            done = tf.cond(
                missing > 0, lambda: _report(path, missing, expected), lambda: tf.constant(True)
            )
        with tf.control_dependencies([done]):
            return tf.boolean_mask(record, tf.logical_not(is_end))

    return indexed.map(check).unbatch()


def _report(path, missing, expected):
    with tf.control_dependencies(
        [
            tf.print(
                "tfdist_opt.data: skipped",
                missing,
                "of",
                expected,
                "record(s) of",
                path,
                "(from its first corrupt record to "
                "its end; PipelineOptions(corrupt_records='skip'))",
                output_stream=sys.stderr,
            )
        ]
    ):
        return tf.constant(True)
