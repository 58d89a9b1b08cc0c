"""Lightning on a tiny classifier trained twice from the same seed, 240 steps: without and with diagnose's callback
profiling steps 200-209. Prints both final losses, the last step reached and the window's diagnosis."""
import json
import sys

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, TensorDataset

import diagnose

STEPS = 240


class Classifier(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
        self.last_loss = None

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.last_loss = loss.item()
        return loss

    def train_dataloader(self):
        g = torch.Generator().manual_seed(0)
        data = TensorDataset(torch.randn(4096, 32, generator=g), torch.randint(0, 4, (4096,), generator=g))
        return DataLoader(data, batch_size=16, shuffle=False)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def train(callbacks):
    pl.seed_everything(0, verbose=False)
    model = Classifier()
    trainer = pl.Trainer(max_steps=STEPS, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, callbacks=callbacks)
    trainer.fit(model)
    return model.last_loss, trainer.global_step


plain_loss, _ = train([])
callback = diagnose.LightningCallback(at_step=200, steps=10, out=sys.argv[1])
window_loss, last_step = train([callback])
result = callback.result(timeout=180)
print(json.dumps({"loss_plain": plain_loss, "loss_window": window_loss, "last_step": last_step,
                  "steps_profiled": result.diagnosis.steps_profiled, "verdict": result.verdict,
                  "exit_code": result.exit_code}))
