"""DataParallel -> DistributedDataParallel."""
from diagnose.optimizations.base import DYNAMICS
from diagnose.optimizations.recommendation import Recommendation
from diagnose.optimizations.registry import register


@register
class Ddp(Recommendation):
    id = "ddp"
    title = "DistributedDataParallel instead of DataParallel"
    fidelity = DYNAMICS
    why_not_applied = "it needs one process per GPU (torchrun) and a DistributedSampler"
    code = ("# torchrun --nproc-per-node=NUM_GPUS train.py\n"
            "torch.distributed.init_process_group('nccl')\n"
            "model = torch.nn.parallel.DistributedDataParallel(model.cuda(rank), device_ids=[rank])")
