"""Hugging Face Trainer: it builds the DataLoader and the optimizer from TrainingArguments, so the line to edit
is the user's TrainingArguments(...) call and each change is one of its fields."""
from __future__ import annotations

from diagnose.frameworks.framework import LOG_EVERY, Framework, accumulation, sparse_logging


def _batch(metrics: dict) -> dict:
    return {"batch_size": int(max(1, metrics.get("loader_batch_size") or 1) * 16)}


def _workers(metrics: dict) -> dict:
    return {"num_workers": int(max(2, metrics.get("cpu_count") or 2))}


FRAMEWORK = Framework(
    name="huggingface",
    title="the Hugging Face Trainer",
    call="TrainingArguments",
    trainer_modules=("transformers.trainer",),
    # a dataclass: subclasses (Seq2SeqTrainingArguments) get their own __init__ but all run __post_init__
    stamps=(("transformers.training_args", "TrainingArguments", "__post_init__"),),
    config_of=lambda trainer: getattr(trainer, "args", None),
    settings={
        "dataloader.num_workers": lambda s: {"dataloader_num_workers": str(s["num_workers"])},
        "dataloader.persistent_workers": lambda s: {"dataloader_persistent_workers": "True"},
        "dataloader.prefetch_factor": lambda s: {"dataloader_prefetch_factor": str(s.get("prefetch_factor", 4))},
        "dataloader.pin_memory": lambda s: {"dataloader_pin_memory": "True"},
        "batch_size": lambda s: {"per_device_train_batch_size": str(s["batch_size"])},
        "amp": lambda s: {"fp16" if s.get("dtype") == "float16" else "bf16": "True"},
        "tf32": lambda s: {"tf32": "True"},
        "compile": lambda s: {"torch_compile": "True"},
        "optimizer.fused": lambda s: {"optim": '"adamw_torch_fused"'},
        "grad_accumulation": lambda s: {**({"per_device_train_batch_size": str(s["batch_size"])} if "batch_size" in s
                                           else {}), "gradient_accumulation_steps": str(accumulation(s))},
        "activation_checkpointing": lambda s: {"gradient_checkpointing": "True"},
        # logging_steps=1 reads the loss back (a device sync) and formats a log line in every step
        "reduce_host_work": lambda s: {"logging_steps": str(s.get("every", LOG_EVERY))},
    },
    applied_as_setting=frozenset({"reduce_host_work", "batch_size", "grad_accumulation"}),
    watched=("logging_strategy", "logging_steps", "disable_tqdm", "per_device_train_batch_size",
             "gradient_accumulation_steps"),
    covered={"reduce_host_work": sparse_logging("logging_steps", "logging_strategy")},
    notes={"reduce_host_work": "the progress bar is per-step host work too: disable_tqdm=True turns it off"},
    suggest={
        "dataloader.num_workers": _workers,
        "dataloader.persistent_workers": dict,
        "dataloader.prefetch_factor": lambda m: {"prefetch_factor": 4},
        "dataloader.pin_memory": dict,
        "batch_size": _batch,
        "amp": dict, "tf32": dict, "compile": dict, "optimizer.fused": dict, "grad_accumulation": dict,
        "activation_checkpointing": dict, "reduce_host_work": dict,
    },
)
