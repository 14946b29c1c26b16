"""TFDS path on a tiny dataset built locally in a temp data_dir; no network."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from tfdist_opt import data
from tfdist_opt.data import tfds_source

NUM_EXAMPLES = 24


class TfdistOptTinyIds(tfds.core.GeneratorBasedBuilder):
    """24 examples with a unique `id` and a 2x2 `image`; generated locally."""

    VERSION = tfds.core.Version("1.0.0")
    # No checksums file to look for. TFDS finds it through `code_path`, which
    # imports `importlib_resources` (an `etils[epath]` extra this venv lacks).
    code_path = None

    def _info(self):
        return tfds.core.DatasetInfo(
            builder=self,
            features=tfds.features.FeaturesDict(
                {
                    "id": tf.int64,
                    "image": tfds.features.Tensor(shape=(2, 2), dtype=tf.float32),
                }
            ),
            supervised_keys=("image", "id"),
        )

    def _split_generators(self, dl_manager):
        del dl_manager  # nothing to download
        return {"train": self._generate_examples()}

    def _generate_examples(self):
        for i in range(NUM_EXAMPLES):
            yield i, {"id": i, "image": np.full((2, 2), i, np.float32)}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("tfds"))
    builder = TfdistOptTinyIds(data_dir=path)
    builder.download_and_prepare(
        download_config=tfds.download.DownloadConfig(num_shards=4, try_download_gcs=False)
    )
    assert len(builder.info.splits["train"].file_instructions) == 4
    return path


def _ids(ds):
    return [int(i) for b in ds for i in np.asarray(b["id"]).reshape(-1)]


def _ctx(i, n):
    return tf.distribute.InputContext(
        num_input_pipelines=n, input_pipeline_id=i, num_replicas_in_sync=n
    )


@pytest.mark.parametrize(
    "workers,policy,expected",
    [
        (2, "auto", "FILE"),  # 4 TFDS shard files >= 2 workers: ReadConfig(input_context)
        (4, "auto", "FILE"),
        (2, "data", "DATA"),  # tfds.even_splits sub-splits
        (6, "auto", "DATA"),  # 4 files < 6 workers
    ],
)
def test_union_over_workers_is_the_split(data_dir, workers, policy, expected):
    src = data.TFDSSource("tfdist_opt_tiny_ids", data_dir=data_dir)
    opts = data.PipelineOptions(shard_policy=policy, seed=0)
    seen, steps = [], set()
    for i in range(workers):
        ds, plan = data.worker_dataset(src, _ctx(i, workers), workers, options=opts)
        assert plan.policy == expected
        ids = _ids(ds)
        steps.add(len(ids))
        seen += ids
    assert len(steps) == 1  # same number of (1-example) batches everywhere
    assert sorted(seen) == list(range(NUM_EXAMPLES))


def test_not_prepared_and_no_download_is_an_error(tmp_path):
    src = data.TFDSSource("tfdist_opt_tiny_ids", data_dir=str(tmp_path))
    with pytest.raises(FileNotFoundError, match="not prepared.*download=False"):
        tfds_source.load_builder(src)


def test_supervised_fit_on_two_replicas(data_dir, strategy):
    import keras

    src = data.TFDSSource("tfdist_opt_tiny_ids", data_dir=data_dir, as_supervised=True)
    inp = data.build_input(
        src, strategy, 8, map_fn=lambda x, y: (tf.reshape(x, [4]), tf.cast(y, tf.float32))
    )
    assert inp.steps_per_epoch == 3
    with strategy.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile("sgd", "mse")
    assert len(model.fit(inp.dataset, epochs=1, verbose=0).history["loss"]) == 1
