"""Lightning with a slow dataset (items wait 3 ms, as if read from storage) and num_workers=0."""
import time

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, Dataset


class SlowItems(Dataset):
    def __len__(self):
        return 2048

    def __getitem__(self, i):
        time.sleep(0.003)
        g = torch.Generator().manual_seed(i)
        return torch.randn(32, generator=g), torch.randint(0, 4, (), generator=g)


class Classifier(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.log("loss", loss)
        return loss

    def train_dataloader(self):
        return DataLoader(SlowItems(), batch_size=8, shuffle=True, num_workers=0)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


if __name__ == "__main__":
    trainer = pl.Trainer(max_epochs=2, accelerator="cpu", devices=1, logger=True, enable_checkpointing=True,
                         enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Classifier())
