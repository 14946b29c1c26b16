"""benchmarks/powersgd_products.py: TF's matmul vs XLA for PowerSGD's products."""

import numpy as np
import pytest

from benchmarks import powersgd_products


def test_shapes_are_parsed_and_bad_ones_named():
    assert powersgd_products.parse_shape("768x2048") == (768, 2048)
    with pytest.raises(ValueError, match=r"`shapes`: expected ROWSxCOLS .* Received: '768'"):
        powersgd_products.parse_shape("768")
    with pytest.raises(ValueError, match=r"Received: '0x4'"):
        powersgd_products.parse_shape("0x4")


def test_variants_alternate_and_report_medians_in_ms():
    order = []
    calls = {"p": {"tf": lambda: order.append("p/tf"), "xla": lambda: order.append("p/xla")}}
    ticks = iter(np.arange(0.0, 100.0, 0.001))
    medians = powersgd_products.measure(calls, steps=3, warmup=1, clock=lambda: next(ticks))
    assert order == ["p/tf", "p/xla"] + ["p/tf", "p/xla"] * 3
    assert medians == {("p", "tf"): pytest.approx(1.0), ("p", "xla"): pytest.approx(1.0)}


def test_tf_and_xla_variants_compute_the_same_products():
    calls = powersgd_products.products([(12, 6), (6, 3)], rank=2)
    for name in ("p", "q", "approx"):
        np.testing.assert_allclose(calls[name]["tf"](), calls[name]["xla"](), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(calls["q"]["tf"](), calls["q"]["xla_inner"](), rtol=1e-5, atol=1e-6)
