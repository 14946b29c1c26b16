r"""PowerSGD's rank-r products: TF's matmul (oneDNN on CPU) vs XLA, same run.

A PowerSGD step multiplies each gradient matrix M (n x m) by thin factors:
P = M Q (m x r), Q_i = (P^T M)^T and the approximation P Q^T. On CPU, TF's
oneDNN matmul runs these products well below memory bandwidth, so
`tfdist_opt.gradients.powersgd.factor_ops.skinny_matmul` runs all three through an
XLA-compiled matmul instead (for Q_i with P^ transposed before XLA: the
`xla_inner` variant times the transpose inside the dot). This binary
times each product over `--shapes` both ways, the variants alternated call
by call, in one thread (`--threads`), and reports the median milliseconds of
one call over all shapes.

Summary: `p_tf_ms`, `p_xla_ms`, `p_speedup` (tf / xla), the same for `q_`
(Q_i) and `approx_` (P Q^T), and `q_xla_inner_ms`: Q_i through XLA with the
transpose inside the dot, the form `skinny_matmul` avoids.

Example:
    taskset -c 0 python benchmarks/powersgd_products.py \
        --output_json=benchmarks/results/powersgd_products_1core.json
"""

from __future__ import annotations

import functools
import os
import statistics
import sys
import time

from absl import app
from absl import flags

if __package__ in (None, ""):  # run as `python benchmarks/powersgd_products.py`
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import common  # pylint: disable=g-import-not-at-top

_SHAPES = flags.DEFINE_list(
    "shapes",
    ["768x2048", "2048x2048", "2048x10"],
    "Gradient matrices as ROWSxCOLS (default: the train binary's mlp).",
)
_RANK = flags.DEFINE_integer("rank", 4, "PowerSGD rank r.")
_STEPS = flags.DEFINE_integer("steps", 40, "Timed calls per variant.")
_WARMUP = flags.DEFINE_integer("warmup", 3, "Untimed calls per variant.")
_THREADS = flags.DEFINE_integer("threads", 1, "TF intra/inter-op threads.")


def parse_shape(text: str) -> tuple[int, int]:
    """`"768x2048"` -> (768, 2048).

    Raises:
        ValueError: naming the text when it is not two positive ints.
    """
    parts = text.lower().split("x")
    if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise ValueError(
            f"Invalid value for `shapes`: expected ROWSxCOLS with positive ints. Received: {text!r}"
        )
    return int(parts[0]), int(parts[1])


def products(shapes, rank: int):
    """{name: {variant: callable}} over all `shapes` (each call covers all)."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    from tfdist_opt.gradients.powersgd import factor_ops  # pylint: disable=g-import-not-at-top

    cpu = "/device:CPU:0"
    # Variables, not constants: a product of constants may be folded away.
    ms = [tf.Variable(tf.random.stateless_normal(s, [1, i])) for i, s in enumerate(shapes)]
    qs = [
        tf.Variable(tf.random.stateless_normal((s[1], rank), [2, i])) for i, s in enumerate(shapes)
    ]
    ps = [
        tf.Variable(tf.linalg.qr(tf.random.stateless_normal((s[0], rank), [3, i]))[0])
        for i, s in enumerate(shapes)
    ]

    def each(fn):
        @tf.function
        def run():
            # One element of each product: the call waits for all of them
            # without copying 16 MB results out.
            return [
                fn(m.read_value(), q.read_value(), p.read_value())[0, 0]
                for m, q, p in zip(ms, qs, ps)
            ]

        return lambda: [t.numpy() for t in run()]

    return {
        "p": {
            "tf": each(lambda m, q, p: tf.matmul(m, q)),
            "xla": each(lambda m, q, p: factor_ops.skinny_matmul(m, q, cpu)),
        },
        "approx": {
            "tf": each(lambda m, q, p: tf.matmul(p, q, transpose_b=True)),
            "xla": each(lambda m, q, p: factor_ops.skinny_matmul(p, q, cpu, transpose_b=True)),
        },
        "q": {
            "tf": each(lambda m, q, p: tf.transpose(tf.matmul(p, m, transpose_a=True))),
            "xla": each(
                lambda m, q, p: tf.transpose(factor_ops.skinny_matmul(p, m, cpu, transpose_a=True))
            ),
            # What skinny_matmul avoids: the transpose inside the XLA dot.
            "xla_inner": each(lambda m, q, p: tf.transpose(_xla_transposed_a(p, m))),
        },
    }


@functools.cache
def _xla_transposed_a_fn():
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    return tf.function(lambda a, b: tf.matmul(a, b, transpose_a=True), jit_compile=True)


def _xla_transposed_a(a, b):
    return _xla_transposed_a_fn()(a, b)


def measure(calls, steps: int, warmup: int, clock=time.perf_counter) -> dict:
    """Median ms of each (product, variant), the variants alternated."""
    flat = [
        (name, variant, fn) for name, variants in calls.items() for variant, fn in variants.items()
    ]
    for _, _, fn in flat:
        common.time_steps(fn, 0, warmup)
    times = {(name, variant): [] for name, variant, _ in flat}
    for _ in range(steps):
        for name, variant, fn in flat:
            times[(name, variant)] += common.time_steps(fn, 1, clock=clock)
    return {key: 1e3 * statistics.median(ts) for key, ts in times.items()}


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
    shapes = [parse_shape(s) for s in _SHAPES.value]
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    tf.config.threading.set_intra_op_parallelism_threads(_THREADS.value)
    tf.config.threading.set_inter_op_parallelism_threads(_THREADS.value)
    medians = measure(products(shapes, _RANK.value), _STEPS.value, _WARMUP.value)
    rows = [
        {
            "product": name,
            "variant": variant,
            "median_ms": ms,
            "shapes": _SHAPES.value,
            "rank": _RANK.value,
        }
        for (name, variant), ms in medians.items()
    ]
    summary = {}
    for name in ("p", "q", "approx"):
        tf_ms, xla_ms = medians[(name, "tf")], medians[(name, "xla")]
        summary.update(
            {f"{name}_tf_ms": tf_ms, f"{name}_xla_ms": xla_ms, f"{name}_speedup": tf_ms / xla_ms}
        )
    summary["q_xla_inner_ms"] = medians[("q", "xla_inner")]
    for row in rows:
        print(f"{row['product']:>7s} {row['variant']:>4s}: {row['median_ms']:.2f} ms", flush=True)
    print(
        f"P = M Q: xla {summary['p_speedup']:.2f}x; Q_i: xla "
        f"{summary['q_speedup']:.2f}x; P Q^T: xla "
        f"{summary['approx_speedup']:.2f}x",
        flush=True,
    )
    common.write_report(
        "powersgd_products",
        common.flag_config(),
        rows,
        summary,
        output_json=common.OUTPUT_JSON.value,
        csv_path=common.CSV.value,
    )


if __name__ == "__main__":
    app.run(main)
