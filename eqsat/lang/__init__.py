"""The op language: typed ONNX ops, dtypes, and term construction for egglog."""

from eqsat.lang import contrib

contrib.register()  # onnxruntime's ai.onnx-domain ops pass the onnx checker in this process
