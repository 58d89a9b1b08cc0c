"""GPU sample: a small CNN whose training exercises every live GPU path of diagnose.

Run it whenever a CUDA GPU is at hand:

    diagnose run sample_runs/cuda_train.py --experiments all

What it does on purpose (each is something diagnose should see and measure):
- the DataLoader does not pin memory, so host-to-device copies read pageable memory (-> pin_memory);
- the images are built in the main process (num_workers=0), with a little CPU work per item (-> workers);
- every step reads loss.item(), a host-device sync (-> the syncs rule, with its line);
- fp32 convolutions and matmuls with TF32 and autocast off (-> amp, tf32, cudnn.benchmark, channels_last);
- a small batch leaves most of the GPU's memory unused (-> batch_size); torch.cuda memory stats and NVML
  utilization are sampled during the run.

`--device cpu` runs the same loop on the CPU (to check the script itself where there is no GPU).
"""
import argparse
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class NoisyImages(Dataset):
    """Deterministic 3x64x64 images with a little per-item CPU work (normalisation of a random crop)."""

    def __init__(self, n_items, size=64, n_classes=10, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.base = torch.randn(n_items, 3, size + 8, size + 8, generator=g)
        self.labels = torch.randint(0, n_classes, (n_items,), generator=g)
        self.size = size

    def __len__(self):
        return len(self.base)

    def __getitem__(self, idx):
        offset = idx % 8
        crop = self.base[idx, :, offset:offset + self.size, offset:offset + self.size]
        crop = (crop - crop.mean()) / (crop.std() + 1e-5)
        return crop, self.labels[idx]


def make_model(n_classes=10):
    return nn.Sequential(
        nn.Conv2d(3, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
        nn.Conv2d(64, 128, 3, padding=1, stride=2), nn.BatchNorm2d(128), nn.ReLU(),
        nn.Conv2d(128, 256, 3, padding=1, stride=2), nn.BatchNorm2d(256), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, n_classes),
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--num-items", type=int, default=4096)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args()

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("cuda_train.py needs a CUDA GPU (torch.cuda.is_available() is False); use --device cpu to run it "
              "on the CPU", file=sys.stderr)
        sys.exit(2)
    device = torch.device(args.device)
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 on purpose: the tensor-core rule should notice
    torch.backends.cudnn.allow_tf32 = False

    loader = DataLoader(NoisyImages(args.num_items), batch_size=args.batch_size, shuffle=True, num_workers=0)
    model = make_model().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    step = 0
    for epoch in range(args.epochs):
        for images, labels in loader:
            images, labels = images.to(device), labels.to(device)  # pageable memory: blocking copies
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(images), labels)
            loss.backward()
            optimizer.step()
            running = loss.item()  # a host-device sync every step
            if step % 50 == 0:
                print(f"epoch {epoch} step {step} loss {running:.4f}", flush=True)
            step += 1
    print("done", flush=True)


if __name__ == "__main__":
    main()
