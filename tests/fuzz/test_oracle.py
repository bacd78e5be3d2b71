"""The fuzzer's judge must itself tell a wrong output from a right one."""

from __future__ import annotations

import numpy as np
import pytest

from .oracle import compare

F32 = np.float32


@pytest.mark.parametrize("expected, got", [([1.0, 2.0], [1.0, 2.0005]), ([np.nan], [np.nan]),
                                           ([np.inf], [3.2e38]), ([-3.2e38], [-np.inf])])
def test_equal_outputs(expected, got):
    assert compare({"y": np.array(expected, F32)}, {"y": np.array(got, F32)}) == []


@pytest.mark.parametrize("expected, got", [([1.0, 2.0], [1.0, 2.01]), ([np.nan], [0.0]), ([np.inf], [3.2e36]),
                                           ([np.inf], [-3.2e38]), ([np.inf], [np.nan]), ([1.0], [np.inf])])
def test_different_outputs(expected, got):
    assert compare({"y": np.array(expected, F32)}, {"y": np.array(got, F32)})


def test_integers_exactly_and_types_and_shapes():
    assert compare({"y": np.array([3])}, {"y": np.array([4])})
    assert compare({"y": np.array([3], np.int64)}, {"y": np.array([3], np.int32)})
    assert compare({"y": np.zeros((2, 1), F32)}, {"y": np.zeros((1, 2), F32)})
    assert compare({"y": np.zeros(1, F32)}, {"z": np.zeros(1, F32)})
