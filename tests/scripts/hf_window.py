"""A Hugging Face Trainer on a tiny BERT trained twice from the same seed, 240 steps: without and with diagnose's
callback profiling steps 200-209. Prints both final losses, the last step reached and the window's diagnosis."""
import json
import sys

import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainerCallback, TrainingArguments

import diagnose

STEPS = 240


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n=1024, length=16, vocab=64):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, length), generator=g)
        self.labels = torch.randint(0, 2, (n,), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.labels[i]}


class LastLoss(TrainerCallback):
    def __init__(self):
        self.loss, self.step = None, None

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            self.loss, self.step = logs["loss"], state.global_step


def train(callbacks):
    torch.manual_seed(0)
    config = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=32)
    model = BertForSequenceClassification(config)
    args = TrainingArguments(output_dir="hf_out", per_device_train_batch_size=4, logging_steps=STEPS,
                             max_steps=STEPS, report_to=[], use_cpu=True, save_strategy="no", seed=0,
                             disable_tqdm=True)
    last = LastLoss()
    Trainer(model=model, args=args, train_dataset=Tokens(), callbacks=[last, *callbacks]).train()
    return last


plain = train([])
callback = diagnose.HuggingFaceCallback(at_step=200, steps=10, out=sys.argv[1])
windowed = train([callback])
result = callback.result(timeout=180)
print(json.dumps({"loss_plain": plain.loss, "loss_window": windowed.loss, "last_step": windowed.step,
                  "steps_profiled": result.diagnosis.steps_profiled, "verdict": result.verdict,
                  "exit_code": result.exit_code}))
