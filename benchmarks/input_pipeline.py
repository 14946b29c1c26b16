r"""Input pipeline benchmark: naive tf.data vs tfdist_opt's builder, same run.

Writes its own TFRecord files of JPEG-encoded images, then:

- `--mode=throughput` (default): examples/sec of the naive pipeline
  (`TFRecordDataset -> map -> batch`: no parallelism, no prefetch) and of
  ours (`tfdist_opt.data.worker_dataset`: parallel interleave, parallel
  AUTOTUNE map, shuffle, prefetch and, with `--cache=memory` (default),
  the decoded images cached in memory after the first epoch, with the
  random crop/flip/normalize still applied per epoch after the cache), both
  doing JPEG decode + random crop + random flip + normalize. They are
  measured alternately `--repeats` times over repeated epochs and each
  reported as the median of its repeats. Summary: `speedup` (ours / naive),
  `naive_eps`, `opt_eps`; with a cache also `speedup_no_cache` and
  `opt_no_cache_eps` (ours without the cache: what parallelism and
  prefetch alone buy).
- `--mode=input_bound`: trains `--model` with `model.fit` under
  `tfdist_opt.opt_strategy()` on real input from our pipeline and on
  synthetic input (one constant example repeated), and reports whether the
  real-input step time is more than `--input_bound_threshold` slower.
  Summary: `input_bound` (1/0), `real_eps`, `synthetic_eps`,
  `real_vs_synthetic` (real / synthetic throughput).

Example:
    python benchmarks/input_pipeline.py --output_json=/tmp/ip.json
    python benchmarks/input_pipeline.py --mode=input_bound --model=small_cnn
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time

from absl import app
from absl import flags
from absl import logging

if __package__ in (None, ""):  # run as `python benchmarks/input_pipeline.py`
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import common  # pylint: disable=g-import-not-at-top
from benchmarks import progress  # pylint: disable=g-import-not-at-top

_MODE = flags.DEFINE_enum("mode", "throughput", ["throughput", "input_bound"], "What to measure.")
_NUM_IMAGES = flags.DEFINE_integer("num_images", 4096, "Images to write.")
_NUM_FILES = flags.DEFINE_integer("num_files", 8, "TFRecord files to write.")
_IMAGE_SIZE = flags.DEFINE_integer("image_size", 64, "Side of the JPEGs.")
_CROP_SIZE = flags.DEFINE_integer("crop_size", 56, "Side of the random crop.")
_BATCH = flags.DEFINE_integer("batch_size", 64, "Global batch size.")
_STEPS = flags.DEFINE_integer("steps", 50, "Measured steps per repeat.")
_BATCHES_PER_STEP = flags.DEFINE_integer(
    "batches_per_step", 4, "Batches pulled per timed step (throughput mode)."
)
_WARMUP = flags.DEFINE_integer("warmup_steps", 3, "Steps excluded from timing.")
_REPEATS = flags.DEFINE_integer(
    "repeats", 5, "Alternating naive/ours measurements (throughput mode)."
)
_DATA_DIR = flags.DEFINE_string(
    "data_dir", None, "Where to write the TFRecords (default: a temp dir, removed at exit)."
)
_SEED = flags.DEFINE_integer("seed", 0, "Shuffle / augmentation seed.")
_CACHE = flags.DEFINE_enum(
    "cache",
    "memory",
    ["memory", "none"],
    "Our pipeline's cache of decoded images (PipelineOptions.cache); "
    "`none` measures parallelism + prefetch alone.",
)
_MODEL = flags.DEFINE_enum(
    "model",
    "small_cnn",
    ["small_cnn", "mobilenet_v2", "resnet50"],
    "Model for --mode=input_bound (weights=None).",
)
_EPOCHS = flags.DEFINE_integer("epochs", 2, "Epochs per fit in input_bound mode.")
_THRESHOLD = flags.DEFINE_float(
    "input_bound_threshold",
    0.10,
    "Input-bound when real-input throughput is this fraction below synthetic.",
)

_NUM_CLASSES = 10


def write_jpeg_records(
    directory: str, num_images: int, num_files: int, image_size: int, seed: int = 0
) -> list[str]:
    """Writes `num_files` TFRecords of random-ish JPEG images with labels."""
    import numpy as np  # pylint: disable=g-import-not-at-top
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    rng = np.random.default_rng(seed)
    # A few distinct smooth images, re-encoded with noise: realistic JPEG sizes.
    base = rng.integers(0, 255, size=(16, image_size // 8, image_size // 8, 3))
    paths = []
    writers = []
    for k in range(num_files):
        path = os.path.join(directory, f"images-{k:05d}-of-{num_files:05d}.tfrecord")
        paths.append(path)
        writers.append(tf.io.TFRecordWriter(path))
    try:
        for i in range(num_images):
            img = tf.image.resize(base[i % 16][None], (image_size, image_size))[0]
            img = img + rng.normal(0, 8, size=(image_size, image_size, 3))
            jpeg = tf.io.encode_jpeg(
                tf.cast(tf.clip_by_value(img, 0, 255), tf.uint8), quality=90
            ).numpy()
            example = tf.train.Example(
                features=tf.train.Features(
                    feature={
                        "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[jpeg])),
                        "label": tf.train.Feature(
                            int64_list=tf.train.Int64List(value=[i % _NUM_CLASSES])
                        ),
                    }
                )
            )
            writers[i % num_files].write(example.SerializeToString())
    finally:
        for w in writers:
            w.close()
    return paths


def make_preprocessing(crop_size: int, seed: int):
    """`(decode, augment)`: parse + JPEG decode; crop + flip + normalize."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    spec = {
        "image": tf.io.FixedLenFeature([], tf.string),
        "label": tf.io.FixedLenFeature([], tf.int64),
    }

    def decode(serialized):
        ex = tf.io.parse_single_example(serialized, spec)
        return tf.io.decode_jpeg(ex["image"], channels=3), ex["label"]

    def augment(image, label):
        image = tf.image.random_crop(image, [crop_size, crop_size, 3])
        image = tf.image.random_flip_left_right(image)
        image = (tf.cast(image, tf.float32) / 127.5) - 1.0
        return image, label

    del seed  # stateful random ops; the pipelines' shuffles are seeded
    return decode, augment


def naive_dataset(files, batch_size, decode, augment):
    """What a user writes first: one reader, one sequential map, batch."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    return (
        tf.data.TFRecordDataset(files)
        .map(lambda s: augment(*decode(s)))
        .batch(batch_size, drop_remainder=True)
    )


def opt_dataset(files, batch_size, decode, augment, seed, cache="none"):
    """tfdist_opt's per-worker pipeline over the same files."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    from tfdist_opt import data  # pylint: disable=g-import-not-at-top

    ctx = tf.distribute.InputContext(1, 0, 1)
    ds, _ = data.worker_dataset(
        list(files),
        ctx,
        batch_size,
        map_fn=decode,
        augment_fn=augment,
        options=data.PipelineOptions(seed=seed, deterministic=False, cache=cache),
    )
    return ds


def measure_dataset(ds, steps, batches_per_step, warmup, batch_size):
    """Pulls batches from `ds.repeat()`; returns `RateStats` in examples/sec."""
    it = iter(ds.repeat())

    def step():
        for _ in range(batches_per_step):
            next(it)

    times = common.time_steps(step, steps=steps, warmup=warmup)
    return common.summarize(times, items_per_step=batch_size * batches_per_step)


def run_throughput(files):
    import statistics  # pylint: disable=g-import-not-at-top

    decode, augment = make_preprocessing(_CROP_SIZE.value, _SEED.value)
    builders = {
        "naive": lambda: naive_dataset(files, _BATCH.value, decode, augment),
        "opt": lambda: opt_dataset(
            files, _BATCH.value, decode, augment, _SEED.value, cache=_CACHE.value
        ),
    }
    if _CACHE.value != "none":
        builders["opt_no_cache"] = lambda: opt_dataset(
            files, _BATCH.value, decode, augment, _SEED.value
        )
    rows, rates = [], {name: [] for name in builders}
    bar = progress.Progress(_REPEATS.value * len(builders), enabled=common.is_chief())
    for repeat in range(_REPEATS.value):
        for name, build in builders.items():
            stats = measure_dataset(
                build(), _STEPS.value, _BATCHES_PER_STEP.value, _WARMUP.value, _BATCH.value
            )
            rates[name].append(stats.median)
            rows.append(
                {
                    "setting": f"{name} #{repeat}",
                    "pipeline": name,
                    "repeat": repeat,
                    **stats.to_dict(),
                }
            )
            logging.info("%s (repeat %d): %s", name, repeat, stats.format("examples/sec"))
            print(f"{name:>12} repeat {repeat}: {stats.format('examples/sec')}", flush=True)
            bar.done(f"repeat {repeat + 1}/{_REPEATS.value} {name}")
    medians = {name: statistics.median(r) for name, r in rates.items()}
    naive, opt = medians["naive"], medians["opt"]
    summary = {"speedup": opt / naive, "naive_eps": naive, "opt_eps": opt}
    if "opt_no_cache" in medians:
        summary["speedup_no_cache"] = medians["opt_no_cache"] / naive
        summary["opt_no_cache_eps"] = medians["opt_no_cache"]
    print(
        f"speedup (ours / naive): {summary['speedup']:.2f}x  "
        f"naive {naive:.1f} eps, ours {opt:.1f} eps (cache={_CACHE.value})"
        + (
            f"; without the cache {summary['speedup_no_cache']:.2f}x"
            if "speedup_no_cache" in summary
            else ""
        ),
        flush=True,
    )
    return (
        rows,
        summary,
        common.PlotSpec(
            x="setting",
            ys=("median",),
            title="input pipeline examples/sec (median per repeat)",
            ylabel="examples/sec",
        ),
    )


def _model(name, input_shape):
    import keras  # pylint: disable=g-import-not-at-top

    if name == "small_cnn":
        return keras.Sequential(
            [
                keras.Input(input_shape),
                keras.layers.Conv2D(32, 3, strides=2, activation="relu"),
                keras.layers.Conv2D(64, 3, strides=2, activation="relu"),
                keras.layers.GlobalAveragePooling2D(),
                keras.layers.Dense(_NUM_CLASSES),
            ]
        )
    apps = {"mobilenet_v2": keras.applications.MobileNetV2, "resnet50": keras.applications.ResNet50}
    if name not in apps:
        raise ValueError(
            f"Unrecognized model: {name!r}. Expected one of: small_cnn, {', '.join(apps)}."
        )
    return apps[name](weights=None, input_shape=input_shape, classes=_NUM_CLASSES)


class _BatchTimes:
    """Keras callback recording each train batch's wall time."""

    def __new__(cls):
        import keras  # pylint: disable=g-import-not-at-top

        class BatchTimes(keras.callbacks.Callback):
            def __init__(self):
                super().__init__()
                self.durations = []
                self._start = None

            def on_train_batch_begin(self, batch, logs=None):
                self._start = time.perf_counter()

            def on_train_batch_end(self, batch, logs=None):
                self.durations.append(time.perf_counter() - self._start)

        return BatchTimes()


def run_input_bound(files, strategy):
    import keras  # pylint: disable=g-import-not-at-top
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    from tfdist_opt import data  # pylint: disable=g-import-not-at-top

    decode, augment = make_preprocessing(_CROP_SIZE.value, _SEED.value)
    crop = _CROP_SIZE.value
    opts = data.PipelineOptions(seed=_SEED.value, deterministic=False)
    real = data.build_input(
        files, strategy, _BATCH.value, map_fn=decode, augment_fn=augment, options=opts
    )
    per_worker = real.plans[0].shard_sizes[real.plans[0].worker_index]

    def synthetic_fn(ctx):
        del ctx
        example = (tf.zeros([crop, crop, 3], tf.float32), tf.constant(0, tf.int64))
        return tf.data.Dataset.from_tensors(example).repeat(per_worker)

    synthetic = data.build_input(
        data.DatasetFnSource(synthetic_fn, examples_per_worker=per_worker),
        strategy,
        _BATCH.value,
        options=opts.replace(shuffle=False),
    )
    rows, stats = [], {}
    bar = progress.Progress(2, enabled=common.is_chief())
    for name, inp in (("synthetic", synthetic), ("real", real)):
        with strategy.scope():
            model = _model(_MODEL.value, (crop, crop, 3))
            model.compile(
                "sgd",
                keras.losses.SparseCategoricalCrossentropy(from_logits=_MODEL.value == "small_cnn"),
            )
        timer = _BatchTimes()
        model.fit(inp.dataset, epochs=_EPOCHS.value, verbose=0, shuffle=False, callbacks=[timer])
        s = common.summarize(
            timer.durations,
            items_per_step=_BATCH.value,
            warmup=min(_WARMUP.value, len(timer.durations) - 1),
        )
        stats[name] = s
        rows.append({"input": name, "model": _MODEL.value, **s.to_dict()})
        print(
            f"{name:>9}: {s.format('examples/sec')} (step {1000 * s.step_time_median_s:.1f} ms)",
            flush=True,
        )
        bar.done(f"input {name}")
    ratio = stats["real"].median / stats["synthetic"].median
    bound = ratio < 1.0 - _THRESHOLD.value
    summary = {
        "input_bound": int(bound),
        "real_eps": stats["real"].median,
        "synthetic_eps": stats["synthetic"].median,
        "real_vs_synthetic": ratio,
    }
    print(
        f"input-bound: {'YES' if bound else 'no'} (real input runs at "
        f"{100 * ratio:.0f}% of synthetic)",
        flush=True,
    )
    return (
        rows,
        summary,
        common.PlotSpec(
            x="input", ys=("median",), title=f"{_MODEL.value}: examples/sec", ylabel="examples/sec"
        ),
    )


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
    started = time.perf_counter()
    # Before any other TF op (virtual devices / collectives are set up here).
    import tfdist_opt  # pylint: disable=g-import-not-at-top

    strategy = tfdist_opt.opt_strategy()
    directory = _DATA_DIR.value or tempfile.mkdtemp(prefix="tfdist_opt_ip_")
    os.makedirs(directory, exist_ok=True)
    try:
        files = write_jpeg_records(
            directory, _NUM_IMAGES.value, _NUM_FILES.value, _IMAGE_SIZE.value, _SEED.value
        )
        if _MODE.value == "throughput":
            rows, summary, plot = run_throughput(files)
        else:
            rows, summary, plot = run_input_bound(files, strategy)
    finally:
        if _DATA_DIR.value is None:
            shutil.rmtree(directory, ignore_errors=True)
    common.write_report(
        "input_pipeline",
        common.flag_config(),
        rows,
        summary,
        output_json=common.OUTPUT_JSON.value,
        csv_path=common.CSV.value,
        plot_path=common.PLOT.value,
        plot=plot,
    )
    print(f"total wall time {time.perf_counter() - started:.1f} s", flush=True)


if __name__ == "__main__":
    app.run(main)
