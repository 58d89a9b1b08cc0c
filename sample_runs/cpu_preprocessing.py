"""CPU-bound preprocessing bottleneck: an expensive transform runs on every
item, every epoch, in the main process.

Each sample is a 128x128 "image" generated from a torch.Generator seeded with
its index (so fetching the same index twice gives identical tensors), then
passed through a deterministic denoising transform: several rounds of
FFT-based low-pass filtering plus a 5x5 convolution blur. That costs ~4 ms of
CPU per item (single-threaded: the script calls torch.set_num_threads(1)),
i.e. ~65 ms per batch of 16, recomputed every epoch with num_workers=0,
while the tiny CNN trains on the result in a few ms. Most of the step is
spent inside the DataLoader's next(), and unlike a sleeping loader the time
is real CPU work inside the transform.

Typical fixes: precompute/cache the transformed data, DataLoader workers,
or a cheaper transform.
"""
import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

IMAGE_SIZE = 128


def make_lowpass_mask(size, cutoff=0.25):
    fy = torch.fft.fftfreq(size).abs().unsqueeze(1)
    fx = torch.fft.rfftfreq(size).abs().unsqueeze(0)
    return ((fy <= cutoff) & (fx <= cutoff)).float()


class Denoise:
    """Deterministic, CPU-heavy transform: repeated FFT low-pass + blur."""

    def __init__(self, size=IMAGE_SIZE, rounds=5):
        self.mask = make_lowpass_mask(size)
        self.kernel = torch.ones(1, 1, 5, 5) / 25.0
        self.rounds = rounds

    def __call__(self, img):
        out = img
        for _ in range(self.rounds):
            spec = torch.fft.rfft2(out)
            out = torch.fft.irfft2(spec * self.mask, s=out.shape[-2:])
            out = F.conv2d(out.unsqueeze(0), self.kernel, padding=2).squeeze(0)
        return (out - out.mean()) / (out.std() + 1e-6)


class NoisyImages(Dataset):
    def __init__(self, n_items, n_classes=10, transform=None, seed=1234):
        self.n_items = n_items
        self.n_classes = n_classes
        self.transform = transform
        self.seed = seed

    def __len__(self):
        return self.n_items

    def __getitem__(self, idx):
        g = torch.Generator().manual_seed(self.seed + idx)
        label = int(torch.randint(0, self.n_classes, (1,), generator=g))
        img = torch.randn(1, IMAGE_SIZE, IMAGE_SIZE, generator=g) + 0.1 * label
        if self.transform is not None:
            img = self.transform(img)
        return img, label


class SmallCNN(nn.Module):
    """Tiny CNN on a 16x16 downsampled view of the image (a few ms per step)."""

    def __init__(self, n_classes=10):
        super().__init__()
        self.features = nn.Sequential(
            nn.AvgPool2d(8),  # 128x128 -> 16x16
            nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(4),
        )
        self.head = nn.Linear(16 * 4 * 4, n_classes)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--num-items", type=int, default=1600)  # 100 batches / epoch
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--log-every", type=int, default=10)
    args = parser.parse_args()

    # Single-threaded on purpose: the transform then costs its full CPU time on
    # one core per item, and the tiny CNN gains nothing from a thread pool.
    torch.set_num_threads(1)
    torch.manual_seed(0)
    dataset = NoisyImages(args.num_items, transform=Denoise())
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True,
                        num_workers=args.num_workers)

    model = SmallCNN()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()

    step = 0
    for epoch in range(args.epochs):
        model.train()
        for images, labels in loader:
            optimizer.zero_grad()
            loss = loss_fn(model(images), labels)
            loss.backward()
            optimizer.step()
            if step % args.log_every == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f}", flush=True)
            step += 1
    print("done", flush=True)


if __name__ == "__main__":
    main()
