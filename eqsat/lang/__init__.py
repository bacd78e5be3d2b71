"""The op language: typed ONNX ops, dtypes, and term construction for egglog."""
