"""What `benchmarks/train.py` measures: the settings (rows) and the run args.

Pure Python until a function needs TensorFlow; nothing here reads flags
(`benchmarks/train.py` reads them once and builds a `RunArgs`).
"""

from __future__ import annotations

import dataclasses
import math

MODELS = ("mlp", "cnn_small", "resnet50", "transformer")
DEFAULT_IMAGE_SIZE = {"mlp": 16, "cnn_small": 32, "resnet50": 224, "transformer": 32}
COMPARES = ("none", "baseline", "ablation", "peer", "scaling", "stall", "cpu_split")

BASELINE_DOC = (
    "same process and strategy object ({strategy}; with several workers "
    "only one MultiWorkerMirroredStrategy can exist per process, and plain "
    "MWMS cannot run Keras 3 fit, so there it is tfdist_opt's "
    "KerasMultiWorkerMirroredStrategy, whose only change is reduce()), with "
    "TF's default CommunicationOptions (bytes_per_pack=0), Keras's own "
    "gradient all-reduce (no packing hook, no compression, no accumulation), "
    "float32, no XLA, and the naive input pipeline (read -> shuffle -> "
    "sequential map -> batch, distributed by Keras with TF's auto-shard; no "
    "parallel map, no prefetch)"
)


PSGD_FIELDS = ("powersgd_rank", "powersgd_start_step", "powersgd_min_compression", "powersgd_wire")


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
    # compression="powersgd" only: (rank, start_step, min_compression, wire).
    powersgd: tuple = ()
    # The stall inspector in multi-worker fit (cfg.stall_warn_s); off for
    # --compare=stall's "stall_off" row.
    stall_inspector: bool = True
    # Keras 3 optimizers run our gradient hooks even at TF's defaults (what
    # opt_strategy() does on multi-worker: fused update).
    hooked: bool = False

    def describe(self) -> str:
        psgd = (
            f" {dict(zip(PSGD_FIELDS, self.powersgd))}"
            if self.compression == "powersgd" and self.powersgd
            else ""
        )
        return (
            f"input={self.pipeline}, bytes_per_pack={self.bytes_per_pack}, "
            f"compression={self.compression}{psgd}, grad_accum={self.grad_accum}, "
            f"mixed_precision={self.mixed_precision}, "
            f"jit_compile={self.jit_compile}, tune_malloc={self.tune_malloc}"
            + (", hooked" if self.hooked else "")
            + ("" if self.stall_inspector else ", stall inspector off")
        )


@dataclasses.dataclass(frozen=True)
class RunArgs:
    """Everything a run needs besides the strategy config, typed.

    `window` is the largest `grad_accum` of the run (timing windows are whole
    accumulation cycles); `warmup` and `batches` are rounded up to windows.
    """

    model: str
    batch_size: int
    num_classes: int
    seed: int
    learning_rate: float
    compare: str
    display_every: int
    image_size: int
    window: int
    rounds: int
    warmup: int
    batches: int
    metrics: tuple = ()  # compile(metrics=...) in every run and peer
    epochs: int = 1  # Keras epochs per round's timed fit (epoch_spread)

    @classmethod
    def build(
        cls,
        *,
        settings,
        model: str,
        batch_size: int,
        num_classes: int,
        seed: int,
        learning_rate: float,
        compare: str,
        display_every: int,
        image_size: int | None,
        rounds: int,
        warmup: int,
        batches: int,
        metrics=(),
        epochs: int = 1,
    ) -> "RunArgs":
        window = max(s.grad_accum for s in settings)
        return cls(
            model=model,
            batch_size=batch_size,
            num_classes=num_classes,
            seed=seed,
            learning_rate=learning_rate,
            compare=compare,
            display_every=display_every,
            image_size=image_size or DEFAULT_IMAGE_SIZE[model],
            window=window,
            rounds=rounds if compare != "none" else 1,
            # Whole accumulation cycles: warm-up ends on a boundary.
            warmup=window * math.ceil(warmup / window),
            batches=window * math.ceil(batches / window),
            metrics=tuple(metrics),
            epochs=epochs,
        )

    @property
    def per_round(self) -> int:
        """Timed batches per setting per round (whole windows)."""
        per_round = self.window * math.ceil(self.batches / (self.window * self.rounds))
        if self.epochs > 1:  # whole epochs of whole windows
            step = self.window * self.epochs
            per_round = step * math.ceil(per_round / step)
        return per_round

    @property
    def in_process_compare(self) -> bool:
        """Several settings share this process's strategy object."""
        return self.compare in ("baseline", "ablation")


def is_multi_worker() -> bool:
    """opt_strategy() tunes malloc for multi-worker strategies only."""
    from tfdist_opt.strategy import topology  # pylint: disable=g-import-not-at-top

    return topology.detect_topology(gpus=()).is_multi_worker


def opt_setting(cfg, multi_worker: bool) -> Setting:
    """The configured setup: what `opt_strategy(cfg)` does."""
    return Setting(
        "opt",
        "tfdist_opt",
        cfg.bytes_per_pack,
        cfg.compression,
        cfg.grad_accum,
        cfg.mixed_precision,
        cfg.jit_compile,
        cfg.tune_malloc and multi_worker,
        _powersgd(cfg),
        hooked=multi_worker,
    )


def _powersgd(cfg) -> tuple:
    return tuple(getattr(cfg, f) for f in PSGD_FIELDS)


def plan_settings(cfg, compare: str, multi_worker: bool | None = None) -> list[Setting]:
    """Settings measured in this process, in order: baseline first, opt last."""
    if multi_worker is None:
        multi_worker = is_multi_worker()
    opt = opt_setting(cfg, multi_worker)
    if compare in ("none", "peer", "scaling", "cpu_split"):  # their own processes
        return [opt]
    if compare == "stall":  # the same setup, the stall inspector off / on
        return [dataclasses.replace(opt, name="stall_off", stall_inspector=False), opt]
    base = Setting("baseline", "naive", powersgd=_powersgd(cfg))
    settings = [base]
    if compare == "ablation":
        single = [
            ("+tf.data", {"pipeline": "tfdist_opt"}),
            ("+packing", {"bytes_per_pack": cfg.bytes_per_pack}),
            ("+compression", {"compression": cfg.compression}),
            ("+grad_accum", {"grad_accum": cfg.grad_accum}),
            ("+mixed_precision", {"mixed_precision": cfg.mixed_precision}),
            ("+jit_compile", {"jit_compile": cfg.jit_compile}),
            ("+malloc", {"tune_malloc": opt.tune_malloc}),
            ("+hooks", {"hooked": opt.hooked}),
        ]
        for name, change in single:
            s = dataclasses.replace(base, name=name, **change)
            if s != dataclasses.replace(base, name=name):  # that one is on
                settings.append(s)
    settings.append(opt)
    return settings


def strategy_config_for(cfg, compare: str):
    """The config the process's strategy is built with.

    With an in-process comparison the strategy keeps TF's defaults; each
    setting then attaches its own gradient options and numerics.
    """
    if compare not in ("baseline", "ablation"):
        return cfg
    return cfg.replace(
        bytes_per_pack=0, compression="none", grad_accum=1, mixed_precision="off", jit_compile=False
    )


def gradient_options(setting: Setting):
    """The `GradientOptions` a setting attaches to the shared strategy.

    An int pack size alone is normally TF's CommunicationOptions, bound to
    the strategy at creation; here the strategy keeps TF's default for the
    baseline, so the packing goes through our hook (`via_hook`).
    """
    from tfdist_opt.gradients.options import GradientOptions  # pylint: disable=g-import-not-at-top

    return GradientOptions(
        bytes_per_pack=setting.bytes_per_pack,
        compression=setting.compression,
        grad_accum=setting.grad_accum,
        via_hook=True,
        hooked=setting.hooked,
        **dict(zip(PSGD_FIELDS, setting.powersgd)),
    )
