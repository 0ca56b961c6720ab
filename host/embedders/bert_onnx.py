"""An ONNX graph of a BERT sentence encoder (sentence-transformers style), built from its weights.

`build_bert_encoder` writes the forward pass of a Hugging Face `BertModel` in eval mode (absolute
positions, token type 0, exact erf GELU, post-LayerNorm) followed by mean pooling over the
attention mask, as standard ONNX (opset 17) operators, with the weights as initializers. So a
model published as `model.safetensors` runs on ONNX Runtime in fp32 without torch, and gives the
same vectors as sentence-transformers does (cosine >= 0.99999997 on the sample library).

Graph inputs: `input_ids`, `attention_mask` (int64, batch x sequence; padding has mask 0).
Graph output: `mean_pooled` (float32, batch x hidden): the mean of the last hidden states over the
unmasked positions, not normalised (the caller normalises in float64, as the library vectors were).

For the int8 graph (see `int8`) the same writer can keep a few input channels of each linear layer
out of quantization: `outlier_channels` maps a linear input's name (`linear_input_names`) to the
channels that are taken out of the input (zeroed) and multiplied by their rows of the weight in a
float32 MatMul of their own (named `... .outliers`, so the quantizer can leave it alone), whose
result is added back: the same function, split in two. `fused_attention` computes attention with
ONNX Runtime's `MultiHeadAttention` operator instead of standard operators. `expose_linear_inputs`
adds every linear input as a graph output, for calibration. Without these options the graph is
the plain fp32 one above.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

OPSET = 17  # LayerNormalization is a standard operator from 17 on
IR_VERSION = 8  # read by every onnxruntime >= 1.14
CONTRIB_DOMAIN = "com.microsoft"  # ONNX Runtime's own operators (MultiHeadAttention)
OUTLIER_SUFFIX = ".outliers"  # names the float32 MatMul of a linear layer's outlier channels


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

    def op(self, op_type: str, *inputs: str, output: str | None = None, domain: str | None = None,
           **attributes: Any) -> str:
        output = output or f"{op_type.lower()}_{len(self.nodes)}"
        # Each node is named after its output (unique), so the quantizer can be told which to skip.
        self.nodes.append(helper.make_node(op_type, list(inputs), [output], name=output, domain=domain, **attributes))
        return output


def linear_input_names(shape: BertShape) -> list[str]:
    """The graph values that feed a linear layer, four per encoder layer: the attention's input (to
    query, key and value), its context (to the output dense), the feed-forward input and its GELU."""
    return [f"layer{i}.{part}" for i in range(shape.layers)
            for part in ("attention_input", "context", "ffn_input", "ffn_hidden")]


def build_bert_encoder(
    weights: Mapping[str, np.ndarray],
    shape: BertShape,
    *,
    outlier_channels: Mapping[str, Sequence[int]] | None = None,
    fused_attention: bool = False,
    expose_linear_inputs: bool = False,
) -> onnx.ModelProto:
    """The encoder + mean pooling graph over `weights` named as in a Hugging Face BertModel
    (`embeddings.word_embeddings.weight`, `encoder.layer.0.attention.self.query.weight`, ...).
    KeyError names a missing weight. The options are the int8 graph's (see the module docstring)."""
    g = _GraphWriter()
    f32 = np.float32
    outliers = outlier_channels or {}
    split: dict[str, tuple[str, str, np.ndarray]] = {}  # linear input -> (inliers, outliers, their channels)

    def weight(name: str) -> np.ndarray:
        return np.asarray(weights[name], dtype=f32)

    def split_input(x: str, width: int) -> tuple[str, str, np.ndarray] | None:
        """`x` (`width` channels) with its outlier channels zeroed, and those channels alone (made once)."""
        channels = np.asarray(outliers.get(x, ()), dtype=np.int64)
        if not channels.size:
            return None
        if x not in split:
            keep = np.ones(width, f32)
            keep[channels] = 0
            inliers = g.op("Mul", x, g.constant(f"{x}.inlier_mask", keep), output=f"{x}.inliers")
            picked = g.op("Gather", x, g.constant(f"{x}.outlier_channels", channels), axis=2,
                          output=f"{x}.outlier_values")
            split[x] = (inliers, picked, channels)
        return split[x]

    def linear(x: str, name: str) -> str:
        # torch.nn.Linear keeps W as (out, in): transpose once here, so the graph is a plain MatMul.
        w = weight(f"{name}.weight").T
        bias = g.constant(f"{name}.bias", weight(f"{name}.bias"))
        parts = split_input(x, w.shape[0])
        if parts is None:
            return g.op("Add", g.op("MatMul", x, g.constant(f"{name}.weight_t", w)), bias)
        inliers, picked, channels = parts
        kept = w.copy()
        kept[channels] = 0  # those rows are multiplied in float32 below
        # MatMul + bias first: ONNX Runtime fuses the pair into its int8 kernel.
        product = g.op("Add", g.op("MatMul", inliers, g.constant(f"{name}.weight_t", kept)), bias)
        return g.op("Add", product, g.op("MatMul", picked, g.constant(f"{name}.outlier_weight_t", w[channels]),
                                         output=f"{name}{OUTLIER_SUFFIX}"))

    def layer_norm(x: str, name: str, output: str | None = None) -> str:
        return g.op(
            "LayerNormalization", x, g.constant(f"{name}.weight", weight(f"{name}.weight")),
            g.constant(f"{name}.bias", weight(f"{name}.bias")), axis=-1, epsilon=shape.layer_norm_eps, output=output,
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
    x = layer_norm(x, "embeddings.LayerNorm", output="layer0.attention_input")

    mask = g.op("Cast", "attention_mask", to=TensorProto.FLOAT)
    if fused_attention:
        key_padding_mask = g.op("Cast", "attention_mask", to=TensorProto.INT32)
    else:
        # Attention bias: 0 where the mask is 1, the lowest float32 where it is 0 (as transformers does),
        # shaped (batch, 1, 1, sequence) to broadcast over heads and query positions.
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
        q, k, v = (linear(x, p + f"attention.self.{part}") for part in ("query", "key", "value"))
        if fused_attention:
            context = g.op("MultiHeadAttention", q, k, v, "", key_padding_mask, domain=CONTRIB_DOMAIN,
                           num_heads=shape.heads, output=f"layer{i}.context")
        else:
            def heads(t: str, perm: list[int]) -> str:
                return g.op("Transpose", g.op("Reshape", t, split_heads), perm=perm)

            scores = g.op("Add", g.op("Mul", g.op("MatMul", heads(q, [0, 2, 1, 3]), heads(k, [0, 2, 3, 1])),
                                      score_scale), bias)  # (B, heads, L, L)
            context = g.op("MatMul", g.op("Softmax", scores, axis=-1), heads(v, [0, 2, 1, 3]))
            context = g.op("Reshape", g.op("Transpose", context, perm=[0, 2, 1, 3]), merge_heads,
                           output=f"layer{i}.context")
        x = layer_norm(g.op("Add", linear(context, p + "attention.output.dense"), x), p + "attention.output.LayerNorm",
                       output=f"layer{i}.ffn_input")
        h = linear(x, p + "intermediate.dense")
        h = g.op("Mul", g.op("Mul", h, g.op("Add", g.op("Erf", g.op("Div", h, sqrt_2)), one)), half,
                 output=f"layer{i}.ffn_hidden")  # exact GELU
        last = i + 1 == shape.layers
        x = layer_norm(g.op("Add", linear(h, p + "output.dense"), x), p + "output.LayerNorm",
                       output=None if last else f"layer{i + 1}.attention_input")

    # Mean pooling over the unmasked positions.
    mask_3d = g.op("Unsqueeze", mask, g.constant("axes_2", np.array([2], np.int64)))
    axis_1 = g.constant("axes_1", np.array([1], np.int64))
    summed = g.op("ReduceSum", g.op("Mul", x, mask_3d), axis_1, keepdims=0)
    counted = g.op("Max", g.op("ReduceSum", mask_3d, axis_1, keepdims=0), g.constant("tiny", np.array(1e-9, f32)))
    g.op("Div", summed, counted, output="mean_pooled")

    outputs = [helper.make_tensor_value_info("mean_pooled", TensorProto.FLOAT, ["batch", shape.hidden])]
    if expose_linear_inputs:
        outputs += [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in linear_input_names(shape)]
    graph = helper.make_graph(
        g.nodes, "bert_mean_pooled",
        [helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "sequence"])
         for name in ("input_ids", "attention_mask")],
        outputs,
        g.initializers,
    )
    opsets = [helper.make_opsetid("", OPSET)] + ([helper.make_opsetid(CONTRIB_DOMAIN, 1)] if fused_attention else [])
    return helper.make_model(graph, opset_imports=opsets, ir_version=IR_VERSION, producer_name="polymath-host")
