"""Model definition imported by train.py (sibling module, not a package)."""
from torch import nn


class Net(nn.Module):
    def __init__(self, n_features=32, hidden=128, n_classes=4):
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(n_features, hidden), nn.ReLU(),
            nn.Linear(hidden, hidden), nn.ReLU(),
        )
        self.head = nn.Linear(hidden, n_classes)

    def forward(self, x):
        return self.head(self.body(x))
