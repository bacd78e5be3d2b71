"""The pipeline's stages: load checks, encode, saturate, serialize, extract, decode, explain."""
