"""eqsat calibrate's fusion decisions: measured, booleans, and read back by the Hardware loader."""

from __future__ import annotations

import json

from eqsat.calibrate import fusion_choices
from extract.costs.roofline import Hardware


def test_fusion_choices_are_measured_booleans_that_a_profile_loads(tmp_path):
    got = fusion_choices(runs=10)
    assert set(got) == {"merge_parallel_matmuls", "fuse_skip_layernorm", "fuse_attention", "fuse_unmasked_attention"}
    assert all(isinstance(v, bool) for v in got.values())
    prof = {"name": "t", "matmul_gflops": 1.0, "vector_gflops": 1.0, "mem_gbps": 1.0, "kernel_overhead_us": 1.0, **got}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(prof))
    hw = Hardware.load(str(path))
    keys = ("merge_parallel_matmuls", "fuse_skip_layernorm", "fuse_attention", "fuse_unmasked_attention")
    assert tuple(getattr(hw, k) for k in keys) == tuple(got[k] for k in keys)


def test_a_profile_without_the_keys_merges_nothing_and_fuses_skip_layernorm_and_attention():
    hw = Hardware(name="t", matmul_gflops=1.0, vector_gflops=1.0, mem_gbps=1.0, kernel_overhead_us=1.0)
    assert (hw.merge_parallel_matmuls, hw.fuse_skip_layernorm, hw.fuse_attention, hw.fuse_unmasked_attention) == (
        False, True, True, True)
    cpu = Hardware.load("cpu")
    assert (cpu.merge_parallel_matmuls, cpu.fuse_skip_layernorm, cpu.fuse_attention, cpu.fuse_unmasked_attention) == (
        False, False, False, True)
