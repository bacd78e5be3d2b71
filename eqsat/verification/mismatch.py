"""One output of an optimized model that verification finds unlike the original's."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Mismatch:
    output: str
    detail: str
    requantized: bool = False  # beyond the QDQ allowance: farther than onnxruntime's own optimization moves it

    def __str__(self) -> str:
        return f"output '{self.output}': {self.detail}"
