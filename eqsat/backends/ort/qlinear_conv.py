"""One 8-bit convolution as a model of its own, for the probes and measurements that run
onnxruntime's QLinearConv kernels (target.py's u8s8 probe, calibrate_layout's throughput)."""

from __future__ import annotations

import numpy as np
from onnx import ModelProto, TensorProto, helper, numpy_helper

INPUTS = ("x_scale", "x_zero_point", "w", "w_scale", "w_zero_point", "y_scale", "y_zero_point")


def qlinear_conv_model(x_shape: list[int], consts: dict[str, np.ndarray], **attrs) -> ModelProto:
    """A model of one QLinearConv reading uint8 `x` of `x_shape` and writing uint8 `y`: the
    standard op (NCHW), or com.microsoft's where `attrs` holds channels_last (its input
    NHWC). `consts` holds every name of INPUTS: the scales float32 and the zero points of
    x's and y's type (uint8) and w's; `attrs` are the node's attributes."""
    domain = "com.microsoft" if "channels_last" in attrs else ""
    node = helper.make_node("QLinearConv", ["x", *INPUTS], ["y"], domain=domain, **attrs)
    g = helper.make_graph([node], "qconv", [helper.make_tensor_value_info("x", TensorProto.UINT8, x_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.UINT8, None)],
                          [numpy_helper.from_array(np.asarray(consts[n]), n) for n in INPUTS])
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    return helper.make_model(g, opset_imports=opsets)
