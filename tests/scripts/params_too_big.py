"""A model whose parameters alone take most of a 700 MB limit (six 4096x4096 layers, 403 MB): its gradients do
not fit beside them at any batch size, so under --memory-limit 700MB nothing makes it fit."""
import torch
from torch import nn


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    data = torch.utils.data.TensorDataset(torch.randn(512, 4096), torch.randint(0, 10, (512,)))
    loader = torch.utils.data.DataLoader(data, batch_size=64, drop_last=True)
    model = nn.Sequential(*[nn.Linear(4096, 4096, bias=False) for _ in range(6)], nn.Linear(4096, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    for _ in range(20):
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()


if __name__ == "__main__":
    main()
