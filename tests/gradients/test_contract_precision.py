"""Pure parts: batch contract, compression rules and tolerance, options."""

import pytest

from tfdist_opt.gradients.accumulation import contract
from tfdist_opt.gradients.collectives import precision
from tfdist_opt.gradients.options import GradientOptions


def test_contract_holds():
    contract.check_batch_contract(256, 32, 4, 2)
    assert contract.effective_batch_size(32, 4, 2) == 256


def test_contract_error_names_all_four_numbers():
    with pytest.raises(
        ValueError,
        match=(
            r"global_batch=250, micro_batch=32, grad_accum=4, num_replicas=2 "
            r"\(32 x 4 x 2 = 256\)"
        ),
    ):
        contract.check_batch_contract(250, 32, 4, 2)
    with pytest.raises(ValueError, match=r"or micro_batch=16"):
        contract.check_batch_contract(128, 32, 4, 2)


def test_dataset_batch_must_divide_by_replicas():
    assert contract.micro_batch_from_dataset(8, 4, 2) == 4
    with pytest.raises(
        ValueError,
        match=r"dataset batch=5, grad_accum=4, "
        r"num_replicas=2, micro_batch=2.5",
    ):
        contract.micro_batch_from_dataset(5, 4, 2)


def test_compress_dtype_rules():
    assert precision.compress_dtype("float32", "bfloat16") == "bfloat16"
    assert precision.compress_dtype("float64", "float16") == "float16"
    for untouched in ("int32", "int64", "bool", "float16", "bfloat16"):
        assert precision.compress_dtype(untouched, "bfloat16") is None
    assert precision.compress_dtype("float32", None) is None


def test_predivide_only_for_fp16():
    assert precision.predivide_factor("float16", 4) == 4
    assert precision.predivide_factor("float16", 4, predivide=False) == 1
    assert precision.predivide_factor("bfloat16", 4) == 1


def test_overflow_arithmetic():
    # Two local values of 40000: fits fp16, the plain sum (80000) does not.
    assert precision.fp16_sum_overflows(40000, 2, predivide=False)
    assert not precision.fp16_sum_overflows(40000, 2, predivide=True)


def test_tolerance_is_n_u_t():
    assert precision.compression_rtol("bfloat16", 2, 1, safety=1) == 2 * 2**-8
    assert precision.compression_rtol("float16", 2, 3) == 2 * 3 * 2 * 2**-11
    with pytest.raises(ValueError, match="wire_dtype='int8'"):
        precision.compression_rtol("int8", 2)


@pytest.mark.parametrize(
    "field,value,pattern",
    [
        ("bytes_per_pack", -1, r"Received: bytes_per_pack=-1"),
        ("compression", "int8", r"Received: compression='int8'"),
        ("grad_accum", 0, r"Received: grad_accum=0"),
    ],
)
def test_options_validate(field, value, pattern):
    with pytest.raises(ValueError, match=pattern):
        GradientOptions(**{field: value})


def test_options_default_and_wire():
    assert GradientOptions().is_default
    assert GradientOptions(bytes_per_pack=4096).is_default
    assert not GradientOptions(bytes_per_pack="auto").is_default
    # An int pack size routed through our hook (TF keeps its defaults).
    assert not GradientOptions(bytes_per_pack=4096, via_hook=True).is_default
    assert GradientOptions(via_hook=True).is_default  # nothing to route
    # Hooked at TF's defaults: what multi-worker strategies ask for.
    assert not GradientOptions(hooked=True).is_default
    assert GradientOptions(compression="bf16").wire_dtype == "bfloat16"
