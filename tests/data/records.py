"""Tiny TFRecord files of numbered examples, for sharding tests."""

from __future__ import annotations

import os


def write_id_records(directory: str, sizes: list[int], prefix: str = "part") -> list[str]:
    """Writes len(sizes) files; file k holds sizes[k] examples with unique
    int64 `id`s (0, 1, 2, ... across files). Returns the paths, sorted."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    paths, next_id = [], 0
    for k, size in enumerate(sizes):
        path = os.path.join(directory, f"{prefix}-{k:05d}.tfrecord")
        with tf.io.TFRecordWriter(path) as w:
            for _ in range(size):
                w.write(
                    tf.train.Example(
                        features=tf.train.Features(
                            feature={
                                "id": tf.train.Feature(
                                    int64_list=tf.train.Int64List(value=[next_id])
                                ),
                            }
                        )
                    ).SerializeToString()
                )
                next_id += 1
        paths.append(path)
    return sorted(paths)


def parse_id(serialized):
    """`map_fn` for the files above: serialized Example -> int64 id."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    return tf.io.parse_single_example(serialized, {"id": tf.io.FixedLenFeature([], tf.int64)})["id"]
