"""The batch contract under gradient accumulation: pure arithmetic.

tfdist_opt's convention (stated once, used everywhere):

* the dataset given to `fit` yields **micro x replicas** examples per step
  (the global *micro*-batch): one micro-batch per replica per step, as
  without accumulation;
* the optimizer steps once every `grad_accum` (k) steps, on the mean
  gradient of **micro x k x replicas** examples: the *effective* global
  batch. Learning-rate scaling rules should use the effective batch.

`check_batch_contract` is DeepSpeed's check (train_batch_size ==
micro_batch_per_gpu x gradient_accumulation_steps x world_size) with an
error that shows all four numbers.
"""

from __future__ import annotations

from tfdist_opt import validation


def effective_batch_size(micro_batch: int, grad_accum: int, num_replicas: int) -> int:
    """micro x k x replicas: the examples behind one optimizer step."""
    for name, v in (
        ("micro_batch", micro_batch),
        ("grad_accum", grad_accum),
        ("num_replicas", num_replicas),
    ):
        validation.check_int(name, v, 1)
    return micro_batch * grad_accum * num_replicas


def check_batch_contract(
    global_batch: int, micro_batch: int, grad_accum: int, num_replicas: int
) -> None:
    """Raises unless global_batch == micro x grad_accum x replicas.

    Args:
        global_batch: int. The effective global batch the user intends
            (examples per optimizer step).
        micro_batch: int. Examples per replica per step.
        grad_accum: int. Micro-batches per optimizer step.
        num_replicas: int. Replicas in sync.

    Raises:
        ValueError: the numbers do not multiply out; the message shows all
            four and the nearest consistent choices.

    Example:
        >>> check_batch_contract(256, 32, 4, 2)
    """
    validation.check_int("global_batch", global_batch, 1)
    expected = effective_batch_size(micro_batch, grad_accum, num_replicas)
    if global_batch == expected:
        return
    per = grad_accum * num_replicas
    hint = (
        f"micro_batch={global_batch // per}"
        if global_batch % per == 0
        else f"a global_batch that is a multiple of {per}"
    )
    raise ValueError(
        "Invalid batch contract: global_batch must equal micro_batch x "
        "grad_accum x num_replicas. Received: "
        f"global_batch={global_batch}, micro_batch={micro_batch}, "
        f"grad_accum={grad_accum}, num_replicas={num_replicas} "
        f"({micro_batch} x {grad_accum} x {num_replicas} = {expected}). "
        f"Expected global_batch={expected}, or {hint}."
    )


def micro_batch_from_dataset(dataset_batch: int, grad_accum: int, num_replicas: int) -> int:
    """Per-replica micro-batch from the batch the dataset yields per step.

    Raises:
        ValueError: `dataset_batch` is not a multiple of `num_replicas`
            (shows the four numbers).
    """
    validation.check_int("dataset_batch", dataset_batch, 1)
    if dataset_batch % num_replicas:
        raise ValueError(
            "Invalid batch contract: with grad_accum the dataset yields one "
            "micro-batch per replica per step (micro_batch x num_replicas), "
            "so its batch must divide by num_replicas. Received: "
            f"dataset batch={dataset_batch}, grad_accum={grad_accum}, "
            f"num_replicas={num_replicas}, micro_batch="
            f"{dataset_batch / num_replicas:g}. Expected a dataset batch that "
            f"is a multiple of {num_replicas}; the effective global batch is "
            "micro_batch x grad_accum x num_replicas."
        )
    return dataset_batch // num_replicas


def check_updates_per_fit(
    grad_accum: int,
    steps_per_epoch: int | None,
    epochs: int,
    initial_epoch: int = 0,
    pending_micro_steps: int = 0,
) -> str | None:
    """Before `fit`: a warning line when the fit may apply no update, else None.

    With `grad_accum = k` the optimizer steps once every k micro-batches
    (train steps), counted across epochs. A fit of `epochs - initial_epoch`
    epochs of `steps_per_epoch` steps that runs fewer than k steps applies
    no update unless it resumes a cycle (partial sums restored from a
    checkpoint); `pending_micro_steps` counts those. The line for that case
    starts with "Invalid value"; `tfdist_opt.gradients.accumulation.fit_length` raises it
    when the length is known before step 1 (it checks after the fit's
    callbacks restored any backup) and warns with it otherwise. Also says
    when an epoch is shorter than k (updates then straddle epoch
    boundaries). `steps_per_epoch=None` (unknown length) checks nothing.
    """
    if steps_per_epoch is None or steps_per_epoch < 0 or grad_accum <= 1:
        return None
    total = steps_per_epoch * max(0, epochs - initial_epoch)
    if 0 < total < grad_accum - pending_micro_steps % grad_accum:
        return (
            f"Invalid value for `grad_accum`: this fit runs {total} train "
            f"step(s) ({max(0, epochs - initial_epoch)} epoch(s) x "
            f"{steps_per_epoch} step(s) per epoch) but grad_accum="
            f"{grad_accum} applies an optimizer update only every "
            f"{grad_accum} steps, so it trains nothing unless it resumes a "
            "cycle restored from a checkpoint. Received: "
            f"grad_accum={grad_accum}, steps_per_epoch={steps_per_epoch}, "
            f"epochs={epochs}. Expected grad_accum <= {total}, or more "
            "steps (more data, more epochs, or a repeated dataset with "
            f"steps_per_epoch >= {grad_accum})."
        )
    if steps_per_epoch < grad_accum:
        return (
            f"tfdist_opt grad_accum: an epoch has {steps_per_epoch} "
            f"step(s), fewer than grad_accum={grad_accum}: each optimizer "
            "update spans epochs and per-epoch metrics mix updates"
        )
    return None
