"""benchmarks/train.py end to end at tiny sizes, in subprocesses.

Every model and every data mode runs a few steps; the JSON carries the
summary keys; on 2 real workers only the chief writes JSON / CSV / PNG.
"""

import dataclasses
import json
import os
import subprocess
import time

import numpy as np
import pytest

from tests.multiworker import harness
from tests.multiworker.harness import REPO_ROOT
from tests.multiworker.harness import run_single
from tfdist_opt.strategy.config import StrategyConfig

BINARY = os.path.join(REPO_ROOT, "benchmarks", "train.py")
TINY = [
    "--batch_size=4",
    "--num_warmup_batches=1",
    "--num_batches=2",
    "--display_every=1",
    "--image_size=16",
    "--shuffle_buffer=16",
]
SUMMARY_KEYS = {"speedup", "opt_eps", "baseline_eps"}

try:
    import matplotlib  # noqa: F401

    HAVE_MPL = True
except ImportError:
    HAVE_MPL = False


def _ok(result):
    assert result.returncode == 0, result.output[-4000:]
    return result


def _report(path):
    report = json.loads(path.read_text())
    assert report["benchmark"] == "train"
    return report


def _check_compare_report(report):
    summary = report["summary"]
    assert SUMMARY_KEYS <= set(summary)
    assert summary["speedup"] == pytest.approx(summary["opt_eps"] / summary["baseline_eps"])
    assert [r["setting"] for r in report["results"]][0] == "baseline"
    assert report["results"][-1]["setting"] == "opt"
    assert "naive input pipeline" in report["config"]["baseline"]


def test_every_strategy_config_field_is_a_flag():
    r = run_single([BINARY, "--helpfull"], timeout_s=60)  # absl exits 1
    for field in dataclasses.fields(StrategyConfig):
        assert f"--{field.name}:" in r.output or f"--[no]{field.name}:" in r.output, field.name
    for flag in (
        "--config",
        "--model",
        "--batch_size",
        "--num_warmup_batches",
        "--num_batches",
        "--data",
        "--compare",
        "--output_json",
        "--csv",
        "--plot",
    ):
        assert flag in r.output


@pytest.mark.parametrize(
    "args,message",
    [
        (["--data=parquet:x"], "Invalid value for `--data`"),
        (["--config=no_such_preset"], "no such file or preset"),
        (["--bytes_per_pack=big"], "Invalid value for `--bytes_per_pack`"),
        (["stray"], "Unexpected arguments: stray"),
    ],
)
def test_bad_arguments_fail_before_training(args, message):
    r = run_single([BINARY, *args], timeout_s=60)
    assert r.returncode != 0 and message in r.output, r.output[-2000:]


def test_mlp_synthetic_via_cli_with_preset_and_flag_override(tmp_path):
    """`tfdist-opt bench train`, `--config=cpu_test` plus one flag."""
    out = tmp_path / "r.json"
    argv = [
        "-m",
        "tfdist_opt",
        "bench",
        "train",
        "--model=mlp",
        *TINY,
        "--config=cpu_test",
        "--grad_accum=2",
        "--bytes_per_pack=65536",
        "--compare=baseline",
        f"--output_json={out}",
        f"--csv={tmp_path / 'r.csv'}",
    ]
    if HAVE_MPL:
        argv.append(f"--plot={tmp_path / 'r.png'}")
    r = _ok(run_single(argv, timeout_s=120))
    report = _report(out)
    _check_compare_report(report)
    cfg = report["config"]["strategy_config"]
    # preset (mirrored over 2 virtual CPUs, reduce-to-one) + the flag;
    # unset flags left the preset alone.
    assert (cfg["mode"], cfg["all_reduce"], cfg["cpu_replicas"]) == ("mirrored", "reduce_to_one", 2)
    assert cfg["grad_accum"] == 2 and cfg["compression"] == "none"
    # An int pack size is applied by the gradient hook (the strategy keeps
    # TF's default for the baseline).
    assert "(bytes_per_pack=65536 requested)" in r.output
    opt = report["results"][-1]
    assert opt["grad_accum"] == 2 and opt["replicas"] == 2
    assert opt["window_batches"] == 2  # timed in whole accumulation cycles
    # tf_cnn_benchmarks-style output
    for text in (
        "Model:       mlp",
        "Batch size:  8 global",
        "All-reduce:  reduce_to_one",
        "images/sec: ",
        "(jitter = ",
        "total images/sec: ",
        "speedup (opt / baseline): ",
    ):
        assert text in r.output, text
    assert (tmp_path / "r.csv").read_text().startswith("setting,")
    if HAVE_MPL:
        assert (tmp_path / "r.png").stat().st_size > 0
    # One progress line per round per setting, ending at 100% with an ETA.
    rounds = report["results"][-1]["rounds"]
    bars = [ln for ln in r.output.splitlines() if ln.startswith("progress ")]
    assert len(bars) == 2 * rounds, bars
    assert (
        bars[-1].startswith(f"progress {2 * rounds}/{2 * rounds} (100%) round {rounds}/{rounds} ")
        and ", ETA 0s" in bars[-1]
    )


def _write_jpeg_records(directory, files=2, per_file=16, side=12):
    import tensorflow as tf

    rng = np.random.default_rng(0)
    for k in range(files):
        path = os.path.join(directory, f"img-{k}.tfrecord")
        with tf.io.TFRecordWriter(path) as w:
            for i in range(per_file):
                img = rng.integers(0, 255, (side, side, 3), dtype=np.uint8)
                w.write(
                    tf.train.Example(
                        features=tf.train.Features(
                            feature={
                                "image": tf.train.Feature(
                                    bytes_list=tf.train.BytesList(
                                        value=[tf.io.encode_jpeg(img).numpy()]
                                    )
                                ),
                                "label": tf.train.Feature(
                                    int64_list=tf.train.Int64List(value=[i % 10])
                                ),
                            }
                        )
                    ).SerializeToString()
                )
    return os.path.join(directory, "img-*.tfrecord")


def test_cnn_small_tfrecord(tmp_path):
    pattern = _write_jpeg_records(str(tmp_path))
    out = tmp_path / "r.json"
    r = _ok(
        run_single(
            [
                BINARY,
                "--model=cnn_small",
                *TINY,
                f"--data=tfrecord:{pattern}",
                "--compare=baseline",
                f"--output_json={out}",
            ],
            timeout_s=120,
        )
    )
    report = _report(out)
    _check_compare_report(report)
    assert report["results"][0]["data"] == f"tfrecord:{pattern}"
    assert "Dataset:     tfrecord:" in r.output


def _build_tiny_tfds(data_dir):
    import tensorflow_datasets as tfds

    class TfdistOptBenchTiny(tfds.core.GeneratorBasedBuilder):
        """32 random 10x10 RGB images with labels; built locally."""

        VERSION = tfds.core.Version("1.0.0")
        code_path = None  # no checksums lookup (see tests/data/test_tfds_source.py)

        def _info(self):
            return tfds.core.DatasetInfo(
                builder=self,
                features=tfds.features.FeaturesDict(
                    {
                        "image": tfds.features.Tensor(shape=(10, 10, 3), dtype=np.uint8),
                        "label": np.int64,
                    }
                ),
                supervised_keys=("image", "label"),
            )

        def _split_generators(self, dl_manager):
            del dl_manager
            return {"train": self._generate_examples()}

        def _generate_examples(self):
            rng = np.random.default_rng(0)
            for i in range(32):
                yield (
                    i,
                    {"image": rng.integers(0, 255, (10, 10, 3), dtype=np.uint8), "label": i % 10},
                )

    builder = TfdistOptBenchTiny(data_dir=data_dir)
    builder.download_and_prepare(
        download_config=tfds.download.DownloadConfig(num_shards=2, try_download_gcs=False)
    )
    return builder.name


def test_transformer_tfds_local_dataset(tmp_path):
    data_dir = str(tmp_path / "tfds")
    name = _build_tiny_tfds(data_dir)
    out = tmp_path / "r.json"
    _ok(
        run_single(
            [
                BINARY,
                "--model=transformer",
                *TINY,
                f"--data=tfds:{name}",
                f"--tfds_data_dir={data_dir}",
                "--compare=baseline",
                f"--output_json={out}",
            ],
            timeout_s=120,
        )
    )
    _check_compare_report(_report(out))


def test_resnet50_one_step_without_compare(tmp_path):
    out = tmp_path / "r.json"
    r = _ok(
        run_single(
            [
                BINARY,
                "--model=resnet50",
                "--image_size=32",
                "--batch_size=2",
                "--num_warmup_batches=0",
                "--num_batches=1",
                f"--output_json={out}",
            ],
            timeout_s=150,
        )
    )
    report = _report(out)
    assert set(report["summary"]) == {"opt_eps"}
    assert report["results"][0]["params"] > 20_000_000  # the real ResNet-50
    assert "Baseline:" not in r.output


@pytest.mark.multiworker
def test_two_workers_only_the_chief_writes(tmp_path):
    """Each worker is told its own output paths; only worker 0's appear."""
    ports = harness.free_ports(2)
    procs = []
    try:
        for i in range(2):
            outs = [f"--output_json={tmp_path / f'w{i}.json'}", f"--csv={tmp_path / f'w{i}.csv'}"]
            if HAVE_MPL:
                outs.append(f"--plot={tmp_path / f'w{i}.png'}")
            procs.append(
                subprocess.Popen(
                    [
                        *harness.python(),
                        BINARY,
                        "--model=cnn_small",
                        *TINY,
                        "--compare=ablation",
                        "--grad_accum=2",
                        "--compression=bf16",
                        "--bytes_per_pack=auto",
                        "--collective_timeout_s=60",
                        *outs,
                    ],
                    env=harness.worker_env(i, ports),
                    cwd=REPO_ROOT,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    start_new_session=True,
                )
            )
        deadline = time.monotonic() + 180
        outputs = [p.communicate(timeout=max(1, deadline - time.monotonic()))[0] for p in procs]
    finally:
        for p in procs:
            harness._kill(p)  # pylint: disable=protected-access
    for p, output in zip(procs, outputs):
        assert p.returncode == 0, output[-4000:]
    report = _report(tmp_path / "w0.json")
    _check_compare_report(report)
    assert report["environment"]["workers"] == 2
    assert report["results"][-1]["replicas"] == 2
    assert [r["setting"] for r in report["results"]] == [
        "baseline",
        "+tf.data",
        "+packing",
        "+compression",
        "+grad_accum",
        "+malloc",
        "+hooks",
        "opt",
    ]
    assert {"speedup_tf_data", "speedup_grad_accum", "speedup_malloc", "speedup_hooks"} <= set(
        report["summary"]
    )
    assert [r["tune_malloc"] for r in report["results"]] == [
        False,
        False,
        False,
        False,
        False,
        True,
        False,
        True,
    ]  # multi-worker default on
    # What opt_strategy() does on multi-worker: Keras 3 optimizers hooked.
    assert [r["hooked"] for r in report["results"]] == [False] * 6 + [True, True]
    assert (tmp_path / "w0.csv").exists()
    assert HAVE_MPL is (tmp_path / "w0.png").exists()
    assert sorted(os.listdir(tmp_path)) == sorted(
        ["w0.json", "w0.csv"] + (["w0.png"] if HAVE_MPL else [])
    )
    assert "KerasMultiWorkerMirroredStrategy" in outputs[0]
    assert "images/sec: " in outputs[0] and "images/sec: " not in outputs[1]


def test_compare_stall_alternates_the_inspector_and_reports_the_ratio():
    from benchmarks.train_lib import report
    from benchmarks.train_lib import settings as settings_lib

    rows = settings_lib.plan_settings(StrategyConfig(), "stall", multi_worker=True)
    assert [(s.name, s.stall_inspector) for s in rows] == [("stall_off", False), ("opt", True)]
    assert "stall inspector off" in rows[0].describe()
    summary = report.summarize({"stall_off": 100.0, "opt": 98.0}, "stall")
    assert summary["stall_inspector_ratio"] == pytest.approx(0.98)
    assert summary["stall_off_eps"] == 100.0
