"""Several collectives in flight at once on a shaped link: does it pay?

Runs as root: two emulated hosts (`testbed_lib.TestBed`, one worker each)
joined by `--link` (1gbit by default). Each worker all-reduces `--mb` MB of
float32 with TF's collective op (`tf.raw_ops.CollectiveReduceV2`, RING over
gRPC), cut into k equal parts, in these shapes:

* `k=1`: one collective (what TF's multi-worker all-reduce of one pack
  runs); `subdivs` sets the ring's `max_subdivs_per_device` (-1: TF's
  choice, the default everywhere);
* `chained`: k collectives sharing one ordering token (what k packs
  issued through one `tf.distribute` launcher run: the token makes each
  wait for the previous one);
* `concurrent`: k collectives, each with its own ordering token (and
  instance key): up to k in flight at once. (Without any token they would
  still run one at a time: a tf.function runs stateful ops that take no
  resource in program order.)

Cases run in rotated rounds (`--rounds`), `--iters` timed calls each after
two untimed ones; per case the median over rounds of each round's median.
busbw = payload x 2(n-1)/n / time (n = 2: the payload per second), and
`link_fraction` = busbw / link rate. Prints one line per case and writes
`--output_json` through `common.write_report` (with the commit, the
resolved `StrategyConfig` and the machine, like every benchmark); the
summary holds `link_fraction_<mb>mb_<case>` per case.

    sudo python benchmarks/collectives_in_flight.py --link=1gbit --mb=16 \\
        --rounds=3 --output_json=/tmp/inflight.json
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

from absl import app
from absl import flags

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from benchmarks import common  # noqa: E402  pylint: disable=g-import-not-at-top

_ROLE = flags.DEFINE_enum("role", "driver", ["driver", "worker"], "Internal: who runs.")
_LINK = flags.DEFINE_string("link", "1gbit", "Link rate (tc tbf rate).")
_MB = flags.DEFINE_list("mb", ["4", "16"], "Payload sizes, MB (float32).")
_ROUNDS = flags.DEFINE_integer("rounds", 3, "Rotated rounds over every case.")
_ITERS = flags.DEFINE_integer("iters", 5, "Timed calls per case and round.")
_TIMEOUT = flags.DEFINE_integer("run_timeout_s", 900, "Deadline of the worker pair.")

# (name, k, shape, max_subdivs_per_device)
CASES = (
    ("one", 1, "concurrent", -1),
    ("one_subdivs4", 1, "concurrent", 4),
    ("chained4", 4, "chained", -1),
    ("concurrent2", 2, "concurrent", -1),
    ("concurrent4", 4, "concurrent", -1),
    ("concurrent8", 8, "concurrent", -1),
)
RATES = {"1gbit": 125e6, "10gbit": 1.25e9}


def _worker() -> None:
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    import tfdist_opt  # pylint: disable=g-import-not-at-top

    tfdist_opt.opt_strategy()  # the cluster's collective executor
    task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    device = f"/job:worker/replica:0/task:{task}/device:CPU:0"
    keys = iter(range(100000, 10**9))
    functions = {}
    for mb in (int(m) for m in _MB.value):
        for index, (name, k, shape, subdivs) in enumerate(CASES):
            functions[(mb, name)] = _case(
                tf, device, 900 + index, keys, mb << 20, k, shape, subdivs
            )
    rows = {key: [] for key in functions}
    order = list(functions)
    for r in range(_ROUNDS.value):
        for key in order[r % len(order) :] + order[: r % len(order)]:
            fn = functions[key]
            for _ in range(2):
                fn().numpy()
            times = []
            for _ in range(_ITERS.value):
                start = time.perf_counter()
                fn().numpy()
                times.append(time.perf_counter() - start)
            rows[key].append(statistics.median(times))
    if task == 0:
        out = []
        for (mb, name), medians in rows.items():
            med = statistics.median(medians)
            out.append(
                {
                    "mb": mb,
                    "case": name,
                    "round_medians_s": medians,
                    "median_s": med,
                    "busbw_MBps": (mb << 20) / med / 1e6,
                }
            )
        print("RESULT " + json.dumps(out), flush=True)


def _case(tf, device, group_key, keys, nbytes, k, shape, subdivs):
    with tf.device(device):
        parts = [tf.ones([nbytes // 4 // k], tf.float32) for _ in range(k)]
        # An ordering token per stream: a tf.function orders collectives that
        # share a token (or that have none: stateful ops without a resource
        # input run in program order), never ones with different tokens.
        tokens = [tf.Variable(0.0) for _ in range(k if shape == "concurrent" else 1)]
    instance_keys = [next(keys) for _ in range(k)]

    @tf.function
    def fn():
        outs, previous = [], None
        with tf.device(device):
            for i, (part, key) in enumerate(zip(parts, instance_keys)):
                previous = tf.raw_ops.CollectiveReduceV2(
                    input=tf.identity(part),
                    group_size=2,
                    group_key=group_key,
                    instance_key=key,
                    ordering_token=[tokens[i % len(tokens)].handle],
                    merge_op="Add",
                    final_op="Id",
                    communication_hint="ring",
                    max_subdivs_per_device=subdivs,
                )
                outs.append(previous[0])
            return tf.add_n(outs)

    return fn


def _driver() -> None:
    from benchmarks import testbed_lib  # pylint: disable=g-import-not-at-top

    reason = testbed_lib.unavailable_reason()
    if reason:
        raise SystemExit(f"collectives_in_flight needs emulated hosts: {reason}")
    argv = [sys.executable, os.path.abspath(__file__), "--role=worker"] + [
        a for a in sys.argv[1:] if not a.startswith("--role")
    ]
    load = [os.getloadavg()[0]]
    with testbed_lib.TestBed(2, rate=_LINK.value) as bed:
        workers = [f"{h.address}:2300" for h in bed.hosts]
        procs = []
        for i, host in enumerate(bed.hosts):
            env = testbed_lib.TestBed.env(
                {
                    "TF_CONFIG": json.dumps(
                        {"cluster": {"worker": workers}, "task": {"type": "worker", "index": i}}
                    ),
                    "TF_CPP_MIN_LOG_LEVEL": "2",
                }
            )
            procs.append(bed.popen(host, argv, env=env))
        try:
            outs = [p.communicate(timeout=_TIMEOUT.value)[0] for p in procs]
        except subprocess.TimeoutExpired:
            for p in procs:
                bed.kill(p)
            raise
        load.append(os.getloadavg()[0])
    lines = [l for l in outs[0].splitlines() if l.startswith("RESULT ")]
    if not lines or any(p.returncode for p in procs):
        raise SystemExit("a worker failed; its output ends:\n" + outs[0][-4000:] + outs[1][-2000:])
    rows = json.loads(lines[0][len("RESULT ") :])
    rate = RATES.get(_LINK.value)
    for row in rows:
        row["link_fraction"] = row["busbw_MBps"] * 1e6 / rate if rate else None
        print(
            f"{_LINK.value} {row['mb']:>3} MB {row['case']:<14} {1e3 * row['median_s']:7.1f} ms "
            f"busbw {row['busbw_MBps']:6.1f} MB/s"
            + (f" ({row['link_fraction']:.2f} of the link)" if rate else "")
        )
    print(f"load average (1 min) before/after: {load[0]:.1f} / {load[1]:.1f}")
    summary = {
        "load_avg_1m_before": load[0],
        "load_avg_1m_after": load[1],
        **{
            f"link_fraction_{row['mb']}mb_{row['case']}": row["link_fraction"]
            for row in rows
            if row["link_fraction"] is not None
        },
    }
    common.write_report(
        "collectives_in_flight",
        common.flag_config(),
        rows,
        summary,
        output_json=common.OUTPUT_JSON.value,
        csv_path=common.CSV.value,
    )


def main(argv):
    del argv
    _worker() if _ROLE.value == "worker" else _driver()


if __name__ == "__main__":
    app.run(main)
