"""onnxruntime's CPU target: its op set and blocked layout, hardware profiles, calibration, latency."""
