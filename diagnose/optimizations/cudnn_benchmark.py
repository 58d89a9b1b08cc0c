"""cuDNN autotuning of convolution algorithms for fixed input shapes."""
from __future__ import annotations

from diagnose.optimizations.cuda_flag import CudaFlag
from diagnose.optimizations.registry import register


@register
class CudnnBenchmark(CudaFlag):
    id = "cudnn.benchmark"
    title = "cuDNN autotuner"
    module_code = code = "torch.backends.cudnn.benchmark = True"

    def apply(self, setting, changes):
        import torch

        changes.start_hooks.append(lambda: setattr(torch.backends.cudnn, "benchmark", True))
        changes.applied.append("cudnn.benchmark = True")
