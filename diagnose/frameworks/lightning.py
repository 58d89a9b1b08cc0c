"""Lightning: the user writes the DataLoader (train_dataloader) and optimizer (configure_optimizers) in their
own module, so those fixes stay on the user's lines; precision, accumulation and logging are Trainer(...)
arguments."""
from __future__ import annotations

from diagnose.frameworks.framework import LOG_EVERY, Framework, accumulation, sparse_logging

_PRECISION = {"bfloat16": '"bf16-mixed"', "float16": '"16-mixed"'}

FRAMEWORK = Framework(
    name="lightning",
    title="Lightning",
    call="Trainer",
    trainer_modules=("lightning.pytorch.trainer.trainer", "pytorch_lightning.trainer.trainer"),
    stamps=(("lightning.pytorch.trainer.trainer", "Trainer", "__init__"),
            ("pytorch_lightning.trainer.trainer", "Trainer", "__init__")),
    config_of=lambda trainer: trainer,
    settings={
        "amp": lambda s: {"precision": _PRECISION.get(s.get("dtype", "bfloat16"), '"bf16-mixed"')},
        "grad_accumulation": lambda s: {"accumulate_grad_batches": str(accumulation(s))},
        "reduce_host_work": lambda s: {"log_every_n_steps": str(s.get("every", LOG_EVERY))},
    },
    applied_as_setting=frozenset({"reduce_host_work"}),
    watched=("log_every_n_steps", "accumulate_grad_batches"),
    covered={"reduce_host_work": sparse_logging("log_every_n_steps")},
    suggest={"amp": dict, "grad_accumulation": dict, "reduce_host_work": dict},
    builds_loops=False,
)
