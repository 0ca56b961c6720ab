"""The int8 graph of a BERT encoder: ONNX Runtime's dynamic quantization, its outlier channels kept in float32.

The recipe (bump `RECIPE` whenever it changes what is built; cached graphs carry it in their name):
1. Calibrate: run the float32 graph, its linear layers' inputs exposed, over `CALIBRATION_TEXTS`;
   for each linear input, the largest |value| of each channel.
2. Outliers: in each linear input, the (at most `OUTLIERS_PER_INPUT`) channels whose largest value
   is more than `OUTLIER_FACTOR` times the median channel's. MiniLM has a few such channels in
   every layer (e.g. 28 against a median of 1.8 before the feed-forward layers).
3. Write the graph with those channels split out (`bert_onnx`'s `outlier_channels`: they are
   multiplied in float32) and attention fused into ONNX Runtime's MultiHeadAttention.
4. `onnxruntime.quantization.quantize_dynamic`: every MatMul with a weight, except the outlier
   ones, becomes int8: weights per output channel, activations per tensor with the scale computed
   at run time. Attention itself, LayerNorm, GELU and pooling stay float32.

Why the extra steps (measured on the sample library, cosine of each bit's int8 vector to its fp32
one): quantize_dynamic alone, one scale per weight tensor: min 0.86; one scale per weight channel:
min 0.989 (activations quantized with the outliers' range lose the small channels); with the
outliers in float32: min 0.997. docs/importing.md has the full fidelity table.

An int8 vector depends on the other texts of its model run slightly more than an fp32 one (the
activation scale is per run): with runs of similar length (the embedder sorts by length) the
difference is far below the int8 error itself.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from host.embedders.bert_onnx import OUTLIER_SUFFIX, BertShape, build_bert_encoder, linear_input_names

RECIPE = 1
OUTLIERS_PER_INPUT = 4
OUTLIER_FACTOR = 4.0
Batch = tuple[np.ndarray, np.ndarray]  # input_ids, attention_mask (int64, batch x sequence)


def channel_ranges(graph: bytes, batches: Iterable[Batch], names: list[str]) -> dict[str, np.ndarray]:
    """The largest |value| of each channel of each named graph output, over the unmasked tokens."""
    import onnxruntime  # type: ignore[import-untyped]  # ships no type information

    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    session = onnxruntime.InferenceSession(graph, options, providers=["CPUExecutionProvider"])
    ranges: dict[str, np.ndarray] = {}
    for input_ids, attention_mask in batches:
        tokens = attention_mask.astype(bool)
        outputs = session.run(names, {"input_ids": input_ids, "attention_mask": attention_mask})
        for name, values in zip(names, outputs, strict=True):
            largest = np.abs(values[tokens]).max(axis=0)
            ranges[name] = np.maximum(ranges[name], largest) if name in ranges else largest
    return ranges


def outlier_channels(ranges: Mapping[str, np.ndarray]) -> dict[str, list[int]]:
    """Per linear input, its channels far larger than the median channel (step 2), in order."""
    chosen = {}
    for name, largest in ranges.items():
        candidates = np.argsort(-largest, kind="stable")[:OUTLIERS_PER_INPUT]
        outliers = candidates[largest[candidates] > OUTLIER_FACTOR * np.median(largest)]
        chosen[name] = sorted(int(channel) for channel in outliers)
    return chosen


def build_int8_graph(weights: Mapping[str, np.ndarray], shape: BertShape, calibration: Iterable[Batch]) -> bytes:
    """The serialized int8 graph (steps 1-4) of the encoder over `weights`."""
    names = linear_input_names(shape)
    probe = build_bert_encoder(weights, shape, expose_linear_inputs=True).SerializeToString()
    outliers = outlier_channels(channel_ranges(probe, calibration, names))
    del probe
    split = build_bert_encoder(weights, shape, outlier_channels=outliers, fused_attention=True)
    return quantize(split)


def quantize(model: Any) -> bytes:
    """`quantize_dynamic` of an onnx ModelProto (step 4), as bytes."""
    from onnx import TensorProto
    from onnxruntime.quantization import QuantType, quantize_dynamic  # type: ignore[import-untyped]

    keep_float = [node.name for node in model.graph.node if node.name.endswith(OUTLIER_SUFFIX)]
    with tempfile.TemporaryDirectory(prefix="polymath-host-int8-") as directory, _quiet_quantizer():
        out = Path(directory) / "int8.onnx"
        quantize_dynamic(model, out, op_types_to_quantize=["MatMul"], per_channel=True, weight_type=QuantType.QInt8,
                         nodes_to_exclude=keep_float,
                         # MultiHeadAttention is ONNX Runtime's own operator: shape inference cannot type
                         # its output, which is float32 like everything else here.
                         extra_options={"DefaultTensorType": TensorProto.FLOAT})
        return out.read_bytes()


class _FromOnnxRuntime(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "onnxruntime" not in record.pathname


@contextlib.contextmanager
def _quiet_quantizer() -> Iterator[None]:
    """Drop the quantizer's advice to run its pre-processing (logged on the root logger, not ours)."""
    root, advice = logging.getLogger(), _FromOnnxRuntime()
    root.addFilter(advice)
    try:
        yield
    finally:
        root.removeFilter(advice)
