r"""Training benchmark: how fast is this setup, and what does each optimisation buy?

A tf_cnn_benchmarks-style binary for Keras 3 `model.fit` under
`tfdist_opt.opt_strategy()`. Runs as one process or as every worker of a
cluster (`tfdist-opt launch -n N -- python benchmarks/train.py ...`).

    python benchmarks/train.py --model=cnn_small --batch_size=32
    tfdist-opt launch -n 2 -- python benchmarks/train.py --model=cnn_small \
        --bytes_per_pack=auto --compression=bf16 --grad_accum=4 \
        --compare=baseline --output_json=/tmp/train.json --plot=/tmp/train.png

Strategy settings come from `--config` (a path or a preset name from
`configs/`) with every `StrategyConfig` field also a flag; a flag left unset
does not override the config (precedence: defaults < config file <
`TFDIST_OPT_*` environment < flags).

`--compare=baseline` also measures, in the same invocation, the same model on
the same data with plain tf.distribute defaults (see `_BASELINE_DOC`);
`--compare=ablation` adds one row per optimisation switched on alone, so the
table says what each one buys. Summary keys: `speedup` (opt / baseline
examples/sec), `opt_eps`, `baseline_eps`, and `speedup_<setting>` for
ablation rows.

Timing: a Keras callback records each batch's wall time (batch end to batch
end, so the input wait is included); `--num_warmup_batches` are dropped; the
rest is timed in windows of W batches, W the largest `grad_accum` in the run
(one whole accumulation cycle, so accumulate-only steps never look like full
steps), and reported as median +/- spread (jitter = 1.4826 MAD). With a
comparison the timed batches are split into `--rounds`; each round runs every
setting in turn on its own (already traced) model, so a load change on a
shared machine falls on every setting alike.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import time

from absl import app
from absl import flags
from absl import logging

if __package__ in (None, ""):  # run as `python benchmarks/train.py`
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import common  # pylint: disable=g-import-not-at-top
from benchmarks import progress  # pylint: disable=g-import-not-at-top

MODELS = ("mlp", "cnn_small", "resnet50", "transformer")
_DEFAULT_IMAGE_SIZE = {"mlp": 32, "cnn_small": 32, "resnet50": 224,
                       "transformer": 32}

_MODEL = flags.DEFINE_enum("model", "cnn_small", list(MODELS), "Model to train.")
_BATCH = flags.DEFINE_integer("batch_size", 32, "Batch size per replica "
                              "(per micro-batch with grad_accum).")
_WARMUP = flags.DEFINE_integer("num_warmup_batches", 5,
                               "Batches run before timing starts.")
_NUM_BATCHES = flags.DEFINE_integer("num_batches", 40, "Batches timed.")
_DISPLAY_EVERY = flags.DEFINE_integer("display_every", 10,
                                      "Print a progress line every N batches.")
_IMAGE_SIZE = flags.DEFINE_integer(
    "image_size", None, "Input side (default: 224 for resnet50, else 32).")
_NUM_CLASSES = flags.DEFINE_integer("num_classes", 10, "Output classes.")
_DATA = flags.DEFINE_string(
    "data", "synthetic",
    "synthetic | tfrecord:PATTERN (tf.train.Example with an encoded `image` "
    "and an int64 `label`) | tfds:NAME (a dataset prepared in --tfds_data_dir; "
    "never downloaded).")
_TFDS_DATA_DIR = flags.DEFINE_string("tfds_data_dir", None,
                                     "data_dir for --data=tfds:NAME.")
_TFDS_SPLIT = flags.DEFINE_string("tfds_split", "train",
                                  "Split for --data=tfds:NAME.")
_SHUFFLE_BUFFER = flags.DEFINE_integer(
    "shuffle_buffer", 1024, "Shuffle buffer, the same in both pipelines.")
_LEARNING_RATE = flags.DEFINE_float("learning_rate", 0.01, "SGD learning rate.")
_SEED = flags.DEFINE_integer("seed", 0, "Data and shuffle seed.")
_COMPARE = flags.DEFINE_enum(
    "compare", "none", ["none", "baseline", "ablation"],
    "none: measure the configured setup only; baseline: also plain "
    "tf.distribute defaults in the same run; ablation: baseline, each "
    "optimisation alone, then all.")
_ROUNDS = flags.DEFINE_integer(
    "rounds", 2, "With --compare: split --num_batches into this many rounds; "
    "each round runs every setting in turn (load changes on a shared machine "
    "then fall on all settings alike).")

# --config and every StrategyConfig field, default None: an unset flag
# overrides nothing.
strategy_config = common.define_strategy_flags()

_BASELINE_DOC = (
    "same process and strategy object ({strategy}; with several workers "
    "only one MultiWorkerMirroredStrategy can exist per process, and plain "
    "MWMS cannot run Keras 3 fit, so there it is tfdist_opt's "
    "KerasMultiWorkerMirroredStrategy, whose only change is reduce()), with "
    "TF's default CommunicationOptions (bytes_per_pack=0), Keras's own "
    "gradient all-reduce (no packing hook, no compression, no accumulation), "
    "float32, no XLA, and the naive input pipeline (read -> shuffle -> "
    "sequential map -> batch, distributed by Keras with TF's auto-shard; no "
    "parallel map, no prefetch)")


# ------------------------------------------------------------- settings
@dataclasses.dataclass(frozen=True)
class Setting:
    """One measured configuration (a row of the results)."""

    name: str
    pipeline: str  # "naive" | "tfdist_opt"
    bytes_per_pack: int | str = 0
    compression: str = "none"
    grad_accum: int = 1
    mixed_precision: str = "off"
    jit_compile: bool = False
    tune_malloc: bool = False

    def describe(self) -> str:
        return (f"input={self.pipeline}, bytes_per_pack={self.bytes_per_pack}, "
                f"compression={self.compression}, grad_accum={self.grad_accum}, "
                f"mixed_precision={self.mixed_precision}, "
                f"jit_compile={self.jit_compile}, tune_malloc={self.tune_malloc}")


def _multi_worker() -> bool:
    """opt_strategy() tunes malloc for multi-worker strategies only."""
    from tfdist_opt.strategy import topology  # pylint: disable=g-import-not-at-top

    return topology.detect_topology(gpus=()).is_multi_worker


def plan_settings(cfg, compare: str) -> list[Setting]:
    """Settings to measure, in order: baseline first, the full setup last."""
    opt = Setting("opt", "tfdist_opt", cfg.bytes_per_pack, cfg.compression,
                  cfg.grad_accum, cfg.mixed_precision, cfg.jit_compile,
                  cfg.tune_malloc and _multi_worker())
    if compare == "none":
        return [opt]
    base = Setting("baseline", "naive")
    settings = [base]
    if compare == "ablation":
        single = [("+tf.data", {"pipeline": "tfdist_opt"}),
                  ("+packing", {"bytes_per_pack": cfg.bytes_per_pack}),
                  ("+compression", {"compression": cfg.compression}),
                  ("+grad_accum", {"grad_accum": cfg.grad_accum}),
                  ("+mixed_precision", {"mixed_precision": cfg.mixed_precision}),
                  ("+jit_compile", {"jit_compile": cfg.jit_compile}),
                  ("+malloc", {"tune_malloc": opt.tune_malloc})]
        for name, change in single:
            s = dataclasses.replace(base, name=name, **change)
            if s != dataclasses.replace(base, name=name):  # that one is on
                settings.append(s)
    settings.append(opt)
    return settings


# ----------------------------------------------------------------- data
def _parse_data(spec: str) -> tuple[str, str | None]:
    kind, _, arg = spec.partition(":")
    if kind == "synthetic" and not arg:
        return kind, None
    if kind in ("tfrecord", "tfds") and arg:
        return kind, arg
    raise app.UsageError(
        f"Invalid value for `--data`: expected synthetic, tfrecord:PATTERN or "
        f"tfds:NAME. Received: --data={spec}")


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

    ex = tf.io.parse_single_example(serialized, {
        "image": tf.io.FixedLenFeature([], tf.string),
        "label": tf.io.FixedLenFeature([], tf.int64)})
    return (tf.io.decode_image(ex["image"], channels=3, expand_animations=False),
            ex["label"])


def _synthetic_arrays(pool: int, image_size: int, num_classes: int, seed: int):
    import numpy as np  # pylint: disable=g-import-not-at-top

    rng = np.random.default_rng(seed)
    x = rng.standard_normal((pool, image_size, image_size, 3), dtype=np.float32)
    y = rng.integers(0, num_classes, size=(pool,)).astype(np.int32)
    return x, y


class Inputs:
    """The two input pipelines over the same data, both repeated forever."""

    def __init__(self, strategy, spec: str, global_batch: int, image_size: int,
                 num_classes: int, total_steps: int, seed: int,
                 shuffle_buffer: int):
        self.kind, self.arg = _parse_data(spec)
        self.strategy = strategy
        self.global_batch = global_batch
        self.image_size = image_size
        self.seed = seed
        self.shuffle_buffer = shuffle_buffer
        self.prep = _preprocess(image_size, num_classes)
        if self.kind == "synthetic":
            example_bytes = image_size * image_size * 3 * 4
            steps = max(1, min(total_steps, 16,
                               (256 << 20) // (global_batch * example_bytes)))
            self.arrays = _synthetic_arrays(steps * global_batch, image_size,
                                            num_classes, seed)
        elif self.kind == "tfds":
            from tfdist_opt import data  # pylint: disable=g-import-not-at-top

            self.tfds_source = data.TFDSSource(
                self.arg, split=_TFDS_SPLIT.value, data_dir=_TFDS_DATA_DIR.value,
                as_supervised=True)

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
            ds = builder.as_dataset(split=self.tfds_source.split,
                                    as_supervised=True, shuffle_files=False)
            ds = ds.shuffle(self.shuffle_buffer, seed=self.seed).map(self.prep)
        return ds.batch(self.global_batch, drop_remainder=True).repeat()

    def optimized(self):
        """tfdist_opt.data's per-worker pipeline, distributed by the strategy."""
        import tensorflow as tf  # pylint: disable=g-import-not-at-top

        from tfdist_opt import data  # pylint: disable=g-import-not-at-top

        options = data.PipelineOptions(seed=self.seed, deterministic=False,
                                       shuffle_buffer=self.shuffle_buffer)
        map_fn = None
        if self.kind == "synthetic":
            source = data.ArraySource(self.arrays)
        elif self.kind == "tfrecord":
            source = data.TFRecordSource(self.arg)

            def map_fn(serialized):
                return self.prep(*_parse_example(serialized))
        else:
            source, map_fn = self.tfds_source, self.prep
        fn = data.make_dataset_fn(source, self.global_batch, map_fn=map_fn,
                                  options=options)
        # Repeated, so a fixed number of steps never crosses an epoch end.
        return self.strategy.distribute_datasets_from_function(
            lambda ctx: fn(ctx).repeat(), options=tf.distribute.InputOptions())


# ---------------------------------------------------------------- models
def build_model(name: str, image_size: int, num_classes: int):
    """A Keras 3 model from its name (lookup table; unknown names listed)."""
    import keras  # pylint: disable=g-import-not-at-top

    shape = (image_size, image_size, 3)

    def mlp():
        return keras.Sequential([
            keras.Input(shape), keras.layers.Flatten(),
            keras.layers.Dense(512, activation="relu"),
            keras.layers.Dense(512, activation="relu"),
            keras.layers.Dense(num_classes)], name="mlp")

    def cnn_small():
        conv = keras.layers.Conv2D
        return keras.Sequential([
            keras.Input(shape),
            conv(32, 3, padding="same", activation="relu"),
            conv(32, 3, padding="same", activation="relu"),
            keras.layers.MaxPooling2D(),
            conv(64, 3, padding="same", activation="relu"),
            conv(64, 3, padding="same", activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Flatten(),
            keras.layers.Dense(256, activation="relu"),
            keras.layers.Dense(num_classes)], name="cnn_small")

    def resnet50():
        return keras.applications.ResNet50(
            weights=None, input_shape=shape, classes=num_classes,
            classifier_activation=None)

    def transformer():
        # A small ViT: 4x4 patches -> 2 pre-norm encoder blocks -> mean pool.
        dim, heads, patch = 64, 4, max(1, min(4, image_size // 2))
        inputs = keras.Input(shape)
        x = keras.layers.Conv2D(dim, patch, strides=patch)(inputs)
        x = keras.layers.Reshape((-1, dim))(x)
        tokens = (image_size // patch) ** 2
        pos = keras.layers.Embedding(tokens, dim)(keras.ops.arange(tokens)[None])
        x = x + pos
        for _ in range(2):
            h = keras.layers.LayerNormalization()(x)
            x = x + keras.layers.MultiHeadAttention(heads, dim // heads)(h, h)
            h = keras.layers.LayerNormalization()(x)
            h = keras.layers.Dense(2 * dim, activation="gelu")(h)
            x = x + keras.layers.Dense(dim)(h)
        x = keras.layers.GlobalAveragePooling1D()(keras.layers.LayerNormalization()(x))
        return keras.Model(inputs, keras.layers.Dense(num_classes)(x),
                           name="transformer")

    table = {"mlp": mlp, "cnn_small": cnn_small, "resnet50": resnet50,
             "transformer": transformer}
    if name not in table:
        raise ValueError(f"Unrecognized model: {name!r}. Expected one of: "
                         f"{', '.join(table)}.")
    return table[name]()


# ---------------------------------------------------------------- timing
class _Printer:
    def __init__(self, chief: bool):
        self.chief = chief

    def __call__(self, line: str = "") -> None:
        if self.chief:
            print(line, flush=True)


def _step_timer(warmup: int, window: int, first_step: int):
    """Keras callback: batch-end to batch-end durations, summed per window.

    The first `warmup` batches of the `fit` call are dropped; the rest are
    summed in windows of `window` batches (`window_durations`).
    """
    import keras  # pylint: disable=g-import-not-at-top

    class StepTimer(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.window_durations: list[float] = []
            self.losses: list[tuple[int, float]] = []
            self._last = None
            self._window_sum = 0.0
            self._step = 0

        def on_train_batch_begin(self, batch, logs=None):
            if self._last is None:
                self._last = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            now = time.perf_counter()
            duration, self._last = now - self._last, now
            self._step += 1
            if self._step <= warmup:
                return
            self._window_sum += duration
            if (self._step - warmup) % window == 0:
                self.window_durations.append(self._window_sum)
                self._window_sum = 0.0
                loss = float((logs or {}).get("loss", float("nan")))
                self.losses.append((first_step + self._step - warmup, loss))

    return StepTimer()


class SettingRun:
    """One setting's model and data, trained in chunks (one per round).

    The model is built and traced once (first chunk, whose first
    `warmup` batches are not timed); later chunks re-use it, dropping one
    window while the fresh iterator fills its buffers. Gradient options and
    numerics are bound when the train step is traced, in the first chunk.
    """

    def __init__(self, setting: Setting, strategy, inputs: Inputs, args,
                 printer):
        self.setting = setting
        self.strategy = strategy
        self.inputs = inputs
        self.args = args
        self.printer = printer
        self.model = None
        self.dataset = None
        self.window_durations: list[float] = []
        self.round_medians: list[float] = []
        self.wall_s = 0.0
        self.items_per_window = inputs.global_batch * args["window"]

    def _build(self):
        import keras  # pylint: disable=g-import-not-at-top

        args = self.args
        keras.utils.set_random_seed(args["seed"])
        self.dataset = (self.inputs.naive() if self.setting.pipeline == "naive"
                        else self.inputs.optimized())
        with self.strategy.scope():
            self.model = build_model(args["model"], self.inputs.image_size,
                                     args["num_classes"])
            self.model.compile(
                optimizer=keras.optimizers.SGD(args["learning_rate"],
                                               momentum=0.9),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                jit_compile=False)

    def run_chunk(self, batches: int) -> None:
        """Trains `batches` timed batches (plus the warm-up of this chunk)."""
        import keras  # pylint: disable=g-import-not-at-top
        import tensorflow as tf  # pylint: disable=g-import-not-at-top

        from tfdist_opt.strategy import host_memory  # pylint: disable=g-import-not-at-top
        from tfdist_opt.gradients import keras_binding  # pylint: disable=g-import-not-at-top

        setting, args, printer = self.setting, self.args, self.printer
        first = self.model is None
        warmup = args["warmup"] if first else args["window"]
        if args["compare"] != "none":
            keras_binding.attach(self.strategy, _gradient_options(setting))
            # Process-wide and switchable at any time: each setting runs
            # with its own allocator policy (the baseline with glibc's).
            if setting.tune_malloc:
                host_memory.tune_for_collectives()
            else:
                host_memory.restore_defaults()
        keras.mixed_precision.set_global_policy(
            "float32" if setting.mixed_precision == "off"
            else setting.mixed_precision)
        tf.config.optimizer.set_jit(setting.jit_compile)
        try:
            if first:
                self._build()
            printer(f"Running warm up ({setting.name}: {setting.describe()})"
                    if first else f"Running {setting.name} (next round)")
            timer = _step_timer(warmup, args["window"],
                                len(self.window_durations) * args["window"])
            started = time.perf_counter()
            self.model.fit(self.dataset, epochs=1, steps_per_epoch=warmup + batches,
                           verbose=0, shuffle=False, callbacks=[timer])
            self.wall_s += time.perf_counter() - started
        finally:
            keras.mixed_precision.set_global_policy("float32")
            tf.config.optimizer.set_jit(False)
            if args["compare"] != "none":
                keras_binding.detach(self.strategy)
        if first:
            printer("Done warm up")
        printer("Step\tImg/sec\ttotal_loss")
        start = len(self.window_durations)
        self.window_durations += timer.window_durations
        every = max(1, args["display_every"] // args["window"])
        for k, (step, loss) in enumerate(timer.losses):
            if (start + k + 1) % every == 0 or k + 1 == len(timer.losses):
                s = common.summarize(self.window_durations[:start + k + 1],
                                     self.items_per_window)
                printer(f"{step}\t{s.format('images/sec')}\t{loss:.3f}")
        self.round_medians.append(common.summarize(
            timer.window_durations, self.items_per_window).median)

    def stats(self):
        return common.summarize(self.window_durations, self.items_per_window)


def _gradient_options(setting: Setting):
    from tfdist_opt.gradients.options import GradientOptions  # pylint: disable=g-import-not-at-top

    options = GradientOptions(bytes_per_pack=setting.bytes_per_pack,
                              compression=setting.compression,
                              grad_accum=setting.grad_accum)
    if options.is_default and setting.bytes_per_pack != 0:
        # An int pack size alone is normally TF's CommunicationOptions, bound
        # to the strategy at creation; here the strategy must keep TF's
        # default for the baseline, so the packing goes through our hook.
        return _pack_only_options(setting.bytes_per_pack)
    return options


def _pack_only_options(bytes_per_pack: int):
    """GradientOptions whose int packing goes through tfdist_opt's hook."""
    from tfdist_opt.gradients.options import GradientOptions  # pylint: disable=g-import-not-at-top

    class PackOnlyOptions(GradientOptions):
        @property
        def is_default(self) -> bool:
            return False

    return PackOnlyOptions(bytes_per_pack=bytes_per_pack)


# ------------------------------------------------------------------ main
def _header(printer, cfg, strategy, inputs, settings, args, replicas, workers):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    from tfdist_opt.strategy import plan as plan_lib  # pylint: disable=g-import-not-at-top
    from tfdist_opt.strategy import topology  # pylint: disable=g-import-not-at-top

    plan = plan_lib.plan_strategy(cfg, topology.detect_topology())
    devices = strategy.extended.worker_devices
    printer(f"TensorFlow:  {tf.__version__}")
    printer(f"Model:       {args['model']} ({inputs.image_size}x"
            f"{inputs.image_size}x3, {args['num_classes']} classes)")
    printer(f"Dataset:     {inputs.describe()}")
    printer("Mode:        training")
    printer(f"Batch size:  {inputs.global_batch} global")
    printer(f"             {args['batch_size']} per device")
    printer(f"Num batches: {args['batches']} timed (+{args['warmup']} warm-up), "
            f"windows of {args['window']}")
    printer(f"Devices:     {list(devices)} x {workers} worker(s) = {replicas} "
            "replica(s)")
    printer(f"Strategy:    {type(strategy).__name__}")
    printer(f"All-reduce:  {plan.all_reduce}")
    printer("Optimizer:   sgd (momentum 0.9)")
    printer(f"Config:      {cfg.to_dict()}")
    for s in settings:
        printer(f"Setting:     {s.name}: {s.describe()}")
    if args["compare"] != "none":
        printer("Baseline:    " + _BASELINE_DOC.format(
            strategy=type(strategy).__name__))
    printer("=" * 10)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
    started = time.perf_counter()
    cfg = strategy_config()
    compare = _COMPARE.value
    for name, value in (("batch_size", _BATCH.value), ("num_batches", _NUM_BATCHES.value),
                        ("rounds", _ROUNDS.value),
                        ("display_every", _DISPLAY_EVERY.value)):
        if value < 1:
            raise app.UsageError(f"Invalid value for `--{name}`: expected a "
                                 f"positive int. Received: --{name}={value}")
    _parse_data(_DATA.value)
    settings = plan_settings(cfg, compare)
    # Before any other TF op (virtual devices / collectives are set up here).
    # With a comparison the strategy keeps TF's defaults; each setting then
    # attaches its own gradient options and numerics.
    import tfdist_opt  # pylint: disable=g-import-not-at-top

    strategy_cfg = cfg if compare == "none" else cfg.replace(
        bytes_per_pack=0, compression="none", grad_accum=1,
        mixed_precision="off", jit_compile=False)
    strategy = tfdist_opt.opt_strategy(strategy_cfg)
    replicas = strategy.num_replicas_in_sync
    workers = common.num_workers()
    chief = common.is_chief()
    printer = _Printer(chief)
    window = max(s.grad_accum for s in settings)
    args = {"model": _MODEL.value, "batch_size": _BATCH.value,
            "num_classes": _NUM_CLASSES.value, "seed": _SEED.value,
            "learning_rate": _LEARNING_RATE.value, "compare": compare,
            "display_every": _DISPLAY_EVERY.value, "window": window,
            "rounds": _ROUNDS.value if compare != "none" else 1,
            # Whole accumulation cycles: warm-up ends on a cycle boundary.
            "warmup": window * math.ceil(_WARMUP.value / window),
            "batches": window * math.ceil(_NUM_BATCHES.value / window)}
    image_size = _IMAGE_SIZE.value or _DEFAULT_IMAGE_SIZE[_MODEL.value]
    inputs = Inputs(strategy, _DATA.value, _BATCH.value * replicas, image_size,
                    _NUM_CLASSES.value, args["warmup"] + args["batches"],
                    _SEED.value, _SHUFFLE_BUFFER.value)
    _header(printer, cfg, strategy, inputs, settings, args, replicas, workers)

    # Round-robin: every setting runs one chunk per round, so load changes on
    # a shared machine fall on all settings alike.
    rounds = args["rounds"]
    per_round = window * math.ceil(args["batches"] / (window * rounds))
    runs = [SettingRun(s, strategy, inputs, args, printer) for s in settings]
    bar = progress.Progress(rounds * len(runs), enabled=common.is_chief())
    for r in range(rounds):
        for run in runs:
            run.run_chunk(per_round)
            bar.done(f"round {r + 1}/{rounds} {run.setting.name}")
    rows, medians = [], {}
    for run in runs:
        stats, setting = run.stats(), run.setting
        medians[setting.name] = stats.median
        printer("-" * 64)
        printer(f"total images/sec: {stats.median:.2f}  ({setting.name}: "
                f"{stats.format('images/sec')}; mean {stats.mean:.2f})")
        printer("-" * 64)
        rows.append({"setting": setting.name, "model": args["model"],
                     "data": inputs.describe(), "input_pipeline": setting.pipeline,
                     "bytes_per_pack": setting.bytes_per_pack,
                     "compression": setting.compression,
                     "grad_accum": setting.grad_accum,
                     "mixed_precision": setting.mixed_precision,
                     "jit_compile": setting.jit_compile,
                     "tune_malloc": setting.tune_malloc,
                     "global_batch": inputs.global_batch,
                     "window_batches": window, "rounds": rounds,
                     "timed_batches": per_round * rounds, "replicas": replicas,
                     "workers": workers, "params": run.model.count_params(),
                     "wall_s": run.wall_s,
                     "round_medians": [round(m, 2) for m in run.round_medians],
                     **stats.to_dict()})
    summary = {"opt_eps": medians["opt"]}
    if compare != "none":
        base = medians["baseline"]
        summary.update(speedup=medians["opt"] / base, baseline_eps=base)
        for name, eps in medians.items():
            if name not in ("opt", "baseline"):
                summary["speedup_" + name.lstrip("+").replace(".", "_")] = eps / base
    for row in rows:
        row["vs_baseline"] = (row["median"] / summary["baseline_eps"]
                              if "baseline_eps" in summary else None)
    config = {**common.flag_config(), "strategy_config": cfg.to_dict(),
              "settings": [dataclasses.asdict(s) for s in settings],
              "baseline": (_BASELINE_DOC.format(strategy=type(strategy).__name__)
                           if compare != "none" else None),
              "timing": f"median over windows of {window} batch(es); "
                        f"{args['warmup']} warm-up batches at the start, one "
                        "window at the start of each later round",
              "comparison": "one process per worker, one strategy object; "
                            f"{rounds} round(s), each running every setting "
                            f"for {per_round} timed batches in turn"}
    common.write_report(
        "train", config, rows, summary, output_json=common.OUTPUT_JSON.value,
        csv_path=common.CSV.value, plot_path=common.PLOT.value,
        plot=common.PlotSpec(
            x="setting", ys=("median",), ylabel="images/sec (global)",
            title=f"{args['model']}, {inputs.describe()}, {workers} worker(s), "
                  f"{replicas} replica(s), batch {args['batch_size']}/replica"))
    for name, eps in medians.items():
        printer(f"{name:>18}: {eps:10.2f} images/sec"
                + (f"  ({eps / summary['baseline_eps']:.2f}x baseline)"
                   if "baseline_eps" in summary else ""))
    if "speedup" in summary:
        printer(f"speedup (opt / baseline): {summary['speedup']:.2f}x")
    printer(f"total wall time {time.perf_counter() - started:.1f} s")
    logging.info("summary: %s", summary)


if __name__ == "__main__":
    app.run(main)
