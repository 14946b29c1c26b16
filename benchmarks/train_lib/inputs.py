"""The benchmark's input pipelines: the same data, naive or tfdist_opt's.

`--data` is `synthetic` (a fixed pool of random images, at most 256 MiB,
repeated), `tfrecord:PATTERN` (tf.train.Example with an encoded `image` and
an int64 `label`) or `tfds:NAME` (a locally prepared TFDS dataset; never
downloaded).
"""

from __future__ import annotations

from absl import app


def parse_data(spec: str) -> tuple[str, str | None]:
    """`--data` -> (kind, argument); a bad spec is a `UsageError`."""
    kind, _, arg = spec.partition(":")
    if kind == "synthetic" and not arg:
        return kind, None
    if kind in ("tfrecord", "tfds") and arg:
        return kind, arg
    raise app.UsageError(
        f"Invalid value for `--data`: expected synthetic, tfrecord:PATTERN or "
        f"tfds:NAME. Received: --data={spec}"
    )


def _preprocess(image_size: int, num_classes: int):
    """image (any size, 1 or 3 channels, any dtype), label -> model input."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    def fn(image, label):
        if image.shape.rank == 2:
            image = image[..., None]
        if image.shape[-1] == 1:
            image = tf.tile(image, [1, 1, 3])
        scale = 127.5 if image.dtype == tf.uint8 else 1.0
        image = tf.image.resize(tf.cast(image, tf.float32), (image_size, image_size))
        image = image / scale - (1.0 if scale != 1.0 else 0.0)
        image.set_shape([image_size, image_size, 3])
        label = tf.cast(tf.reshape(label, []), tf.int64) % num_classes
        return image, tf.cast(label, tf.int32)

    return fn


def _parse_example(serialized):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    ex = tf.io.parse_single_example(
        serialized,
        {
            "image": tf.io.FixedLenFeature([], tf.string),
            "label": tf.io.FixedLenFeature([], tf.int64),
        },
    )
    return (tf.io.decode_image(ex["image"], channels=3, expand_animations=False), ex["label"])


def _synthetic_arrays(pool: int, image_size: int, num_classes: int, seed: int):
    import numpy as np  # pylint: disable=g-import-not-at-top

    rng = np.random.default_rng(seed)
    x = rng.standard_normal((pool, image_size, image_size, 3), dtype=np.float32)
    y = rng.integers(0, num_classes, size=(pool,)).astype(np.int32)
    return x, y


class Inputs:
    """The two input pipelines over the same data, both repeated forever."""

    def __init__(
        self,
        strategy,
        spec: str,
        global_batch: int,
        image_size: int,
        num_classes: int,
        total_steps: int,
        seed: int,
        shuffle_buffer: int,
        tfds_split: str = "train",
        tfds_data_dir: str | None = None,
    ):
        self.kind, self.arg = parse_data(spec)
        self.strategy = strategy
        self.global_batch = global_batch
        self.image_size = image_size
        self.seed = seed
        self.shuffle_buffer = shuffle_buffer
        self.prep = _preprocess(image_size, num_classes)
        if self.kind == "synthetic":
            example_bytes = image_size * image_size * 3 * 4
            steps = max(1, min(total_steps, 16, (256 << 20) // (global_batch * example_bytes)))
            self.arrays = _synthetic_arrays(steps * global_batch, image_size, num_classes, seed)
        elif self.kind == "tfds":
            from tfdist_opt import data  # pylint: disable=g-import-not-at-top

            self.tfds_source = data.TFDSSource(
                self.arg, split=tfds_split, data_dir=tfds_data_dir, as_supervised=True
            )

    def describe(self) -> str:
        return self.kind + (f":{self.arg}" if self.arg else "")

    def naive(self):
        """What a user writes first; Keras distributes it (auto-shard)."""
        import tensorflow as tf  # pylint: disable=g-import-not-at-top

        if self.kind == "synthetic":
            ds = tf.data.Dataset.from_tensor_slices(self.arrays)
            ds = ds.shuffle(self.shuffle_buffer, seed=self.seed)
        elif self.kind == "tfrecord":
            from tfdist_opt.data import pipeline  # pylint: disable=g-import-not-at-top

            ds = tf.data.TFRecordDataset(pipeline.resolve_files(self.arg))
            ds = ds.shuffle(self.shuffle_buffer, seed=self.seed)
            ds = ds.map(_parse_example).map(self.prep)
        else:
            from tfdist_opt.data import tfds_source  # pylint: disable=g-import-not-at-top

            builder = tfds_source.load_builder(self.tfds_source)
            ds = builder.as_dataset(
                split=self.tfds_source.split, as_supervised=True, shuffle_files=False
            )
            ds = ds.shuffle(self.shuffle_buffer, seed=self.seed).map(self.prep)
        return ds.batch(self.global_batch, drop_remainder=True).repeat()

    def optimized(self):
        """tfdist_opt.data's per-worker pipeline, distributed by the strategy."""
        import tensorflow as tf  # pylint: disable=g-import-not-at-top

        from tfdist_opt import data  # pylint: disable=g-import-not-at-top

        options = data.PipelineOptions(
            seed=self.seed, deterministic=False, shuffle_buffer=self.shuffle_buffer
        )
        map_fn = None
        if self.kind == "synthetic":
            source = data.ArraySource(self.arrays)
        elif self.kind == "tfrecord":
            source = data.TFRecordSource(self.arg)

            def map_fn(serialized):
                return self.prep(*_parse_example(serialized))
        else:
            source, map_fn = self.tfds_source, self.prep
        fn = data.make_dataset_fn(source, self.global_batch, map_fn=map_fn, options=options)
        # Repeated, so a fixed number of steps never crosses an epoch end.
        return self.strategy.distribute_datasets_from_function(
            lambda ctx: fn(ctx).repeat(), options=tf.distribute.InputOptions()
        )
