"""An ONNX graph of a BERT sentence encoder (sentence-transformers style), built from its weights.

`build_bert_encoder` writes the forward pass of a Hugging Face `BertModel` in eval mode (absolute
positions, token type 0, exact erf GELU, post-LayerNorm) followed by mean pooling over the
attention mask, as standard ONNX (opset 17) operators, with the weights as initializers. So a
model published as `model.safetensors` runs on ONNX Runtime in fp32 without torch, and gives the
same vectors as sentence-transformers does (cosine >= 0.99999997 on the sample library).

Graph inputs: `input_ids`, `attention_mask` (int64, batch x sequence; padding has mask 0).
Graph output: `mean_pooled` (float32, batch x hidden): the mean of the last hidden states over the
unmasked positions, not normalised (the caller normalises in float64, as the library vectors were).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

OPSET = 17  # LayerNormalization is a standard operator from 17 on
IR_VERSION = 8  # read by every onnxruntime >= 1.14


@dataclass(frozen=True)
class BertShape:
    layers: int
    heads: int
    hidden: int
    layer_norm_eps: float = 1e-12


class _GraphWriter:
    """Accumulates nodes and initializers, naming intermediate values uniquely."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []

    def constant(self, name: str, value: np.ndarray) -> str:
        array = np.ascontiguousarray(value)
        data_type = helper.np_dtype_to_tensor_dtype(array.dtype)
        self.initializers.append(helper.make_tensor(name, data_type, array.shape, array.tobytes(), raw=True))
        return name

    def op(self, op_type: str, *inputs: str, output: str | None = None, **attributes: Any) -> str:
        output = output or f"{op_type.lower()}_{len(self.nodes)}"
        self.nodes.append(helper.make_node(op_type, list(inputs), [output], **attributes))
        return output


def build_bert_encoder(weights: Mapping[str, np.ndarray], shape: BertShape) -> onnx.ModelProto:
    """The encoder + mean pooling graph over `weights` named as in a Hugging Face BertModel
    (`embeddings.word_embeddings.weight`, `encoder.layer.0.attention.self.query.weight`, ...).
    KeyError names a missing weight."""
    g = _GraphWriter()
    f32 = np.float32

    def weight(name: str) -> np.ndarray:
        return np.asarray(weights[name], dtype=f32)

    def linear(x: str, name: str) -> str:
        # torch.nn.Linear keeps W as (out, in): transpose once here, so the graph is a plain MatMul.
        w = g.constant(f"{name}.weight_t", weight(f"{name}.weight").T)
        return g.op("Add", g.op("MatMul", x, w), g.constant(f"{name}.bias", weight(f"{name}.bias")))

    def layer_norm(x: str, name: str) -> str:
        return g.op(
            "LayerNormalization", x, g.constant(f"{name}.weight", weight(f"{name}.weight")),
            g.constant(f"{name}.bias", weight(f"{name}.bias")), axis=-1, epsilon=shape.layer_norm_eps,
        )

    # Embeddings: word + position (rows 0..L-1 of the table) + token type 0, then LayerNorm.
    # Slice with 1-D bounds rather than Range over a scalar: ORT's embedding fusion mis-handles the latter.
    sequence_length = g.op("Shape", "input_ids", start=1, end=2)  # 1-D: [L]
    positions = g.op("Slice", g.constant("position_embeddings", weight("embeddings.position_embeddings.weight")),
                     g.constant("zero", np.array([0], np.int64)), sequence_length,
                     g.constant("axis_0", np.array([0], np.int64)))
    words = g.op("Gather", g.constant("word_embeddings", weight("embeddings.word_embeddings.weight")), "input_ids")
    x = g.op("Add", words, positions)
    x = g.op("Add", x, g.constant("token_type_0", weight("embeddings.token_type_embeddings.weight")[0]))
    x = layer_norm(x, "embeddings.LayerNorm")

    # Attention bias: 0 where the mask is 1, the lowest float32 where it is 0 (as transformers does),
    # shaped (batch, 1, 1, sequence) to broadcast over heads and query positions.
    mask = g.op("Cast", "attention_mask", to=TensorProto.FLOAT)
    bias = g.op("Mul", g.op("Sub", g.constant("one_f", np.array(1, f32)), mask),
                g.constant("lowest_f", np.array(np.finfo(f32).min, f32)))
    bias = g.op("Unsqueeze", bias, g.constant("axes_1_2", np.array([1, 2], np.int64)))

    head_size = shape.hidden // shape.heads
    split_heads = g.constant("split_heads", np.array([0, 0, shape.heads, head_size], np.int64))
    merge_heads = g.constant("merge_heads", np.array([0, 0, shape.hidden], np.int64))
    score_scale = g.constant("score_scale", np.array(1 / np.sqrt(head_size), f32))
    sqrt_2 = g.constant("sqrt_2", np.array(np.sqrt(2), f32))
    one, half = g.constant("one_gelu", np.array(1, f32)), g.constant("half", np.array(0.5, f32))

    for i in range(shape.layers):
        p = f"encoder.layer.{i}."

        def heads(t: str, perm: list[int]) -> str:
            return g.op("Transpose", g.op("Reshape", t, split_heads), perm=perm)

        q = heads(linear(x, p + "attention.self.query"), [0, 2, 1, 3])  # (B, heads, L, d)
        k = heads(linear(x, p + "attention.self.key"), [0, 2, 3, 1])  # (B, heads, d, L)
        v = heads(linear(x, p + "attention.self.value"), [0, 2, 1, 3])
        scores = g.op("Add", g.op("Mul", g.op("MatMul", q, k), score_scale), bias)
        context = g.op("MatMul", g.op("Softmax", scores, axis=-1), v)
        context = g.op("Reshape", g.op("Transpose", context, perm=[0, 2, 1, 3]), merge_heads)
        x = layer_norm(g.op("Add", linear(context, p + "attention.output.dense"), x), p + "attention.output.LayerNorm")
        h = linear(x, p + "intermediate.dense")
        h = g.op("Mul", g.op("Mul", h, g.op("Add", g.op("Erf", g.op("Div", h, sqrt_2)), one)), half)  # exact GELU
        x = layer_norm(g.op("Add", linear(h, p + "output.dense"), x), p + "output.LayerNorm")

    # Mean pooling over the unmasked positions.
    mask_3d = g.op("Unsqueeze", mask, g.constant("axes_2", np.array([2], np.int64)))
    axis_1 = g.constant("axes_1", np.array([1], np.int64))
    summed = g.op("ReduceSum", g.op("Mul", x, mask_3d), axis_1, keepdims=0)
    counted = g.op("Max", g.op("ReduceSum", mask_3d, axis_1, keepdims=0), g.constant("tiny", np.array(1e-9, f32)))
    g.op("Div", summed, counted, output="mean_pooled")

    graph = helper.make_graph(
        g.nodes, "bert_mean_pooled",
        [helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "sequence"])
         for name in ("input_ids", "attention_mask")],
        [helper.make_tensor_value_info("mean_pooled", TensorProto.FLOAT, ["batch", shape.hidden])],
        g.initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION,
                             producer_name="polymath-host")
