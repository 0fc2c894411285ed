"""The datasheet figures of the GPUs the book's GPU references were recorded on.

A GPU box says what a GPU measured; beside it, the roofs that GPU's maker states, so that a reader can
see how close a measurement came (an H200 is not an H100: the same compute, 43% more memory bandwidth).
Datasheet tensor-core figures are quoted "with sparsity" (2:4 structured sparsity doubles them); the
dense figure, which is what a dense matrix product can reach, is half of it and is the one given here.

>>> lookup("NVIDIA H200").hbm_tbs
4.8
>>> lookup("NVIDIA H100 80GB HBM3").name
'NVIDIA H100 SXM5 80GB'
>>> lookup("Some Other GPU") is None
True
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Datasheet:
    """Peak figures of one GPU as its maker states them (dense, without sparsity)."""

    name: str
    fp32_tflops: float           # FP32 on the CUDA cores (no tensor cores)
    tf32_tflops: float           # TF32 tensor cores, dense
    bf16_tflops: float           # BF16/FP16 tensor cores, dense
    fp8_tflops: float            # FP8 tensor cores, dense
    hbm_tbs: float               # memory bandwidth, TB/s
    memory_gb: float
    source: str

    def sentence(self) -> str:
        """One line for a GPU box."""
        return (f"Datasheet of the {self.name} (dense, without sparsity): {self.fp32_tflops:g} TFLOP/s FP32, "
                f"{self.tf32_tflops:g} TF32, {self.bf16_tflops:g} BF16/FP16 and {self.fp8_tflops:g} FP8 on the "
                f"tensor cores; {self.hbm_tbs:g} TB/s to {self.memory_gb:g} GB of memory ({self.source}).")


H100_SOURCE = "NVIDIA H100 Tensor Core GPU datasheet, 2023; tensor-core figures halved from 'with sparsity'"
H200_SOURCE = "NVIDIA H200 Tensor Core GPU datasheet, 2024; tensor-core figures halved from 'with sparsity'"

# (what torch.cuda.get_device_name says contains, datasheet); the first match wins
SHEETS: list[tuple[str, Datasheet]] = [
    ("H200 NVL", Datasheet("NVIDIA H200 NVL 141GB", 60, 417.5, 835.5, 1670.5, 4.8, 141, H200_SOURCE)),
    ("H200", Datasheet("NVIDIA H200 SXM 141GB", 67, 494.5, 989.5, 1979, 4.8, 141, H200_SOURCE)),
    ("H100 PCIe", Datasheet("NVIDIA H100 PCIe 80GB", 51, 378, 756.5, 1513, 2.0, 80, H100_SOURCE)),
    ("H100 NVL", Datasheet("NVIDIA H100 NVL 94GB", 60, 417.5, 835.5, 1670.5, 3.9, 94, H100_SOURCE)),
    ("H100", Datasheet("NVIDIA H100 SXM5 80GB", 67, 494.5, 989.5, 1979, 3.35, 80, H100_SOURCE)),
]


def lookup(device_name: str) -> Datasheet | None:
    """The datasheet of the GPU ``torch.cuda.get_device_name`` calls ``device_name``, or None if unknown here."""
    for key, sheet in SHEETS:
        if key.lower() in device_name.lower():
            return sheet
    return None
