"""eqsat: an ONNX graph optimizer built on equality saturation."""

__version__ = "0.1.0"
