"""TF32 matmuls and convolutions on Ampere and newer GPUs."""
from __future__ import annotations

from diagnose.optimizations.cuda_flag import CudaFlag
from diagnose.optimizations.registry import register


@register
class Tf32(CudaFlag):
    id = "tf32"
    title = "TF32 matmuls and convolutions"
    module_code = code = "torch.backends.cuda.matmul.allow_tf32 = True\ntorch.backends.cudnn.allow_tf32 = True"

    def apply(self, setting, changes):
        import torch

        def enable() -> None:
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True

        changes.start_hooks.append(enable)
        changes.applied.append("allow_tf32 = True")

