"""Fixture: a training script with a Python syntax error (missing colon and
an unclosed parenthesis), so it fails at compile time before any import."""
import torch
from torch import nn


def main()
    model = nn.Linear(4, 2
    print(model)


if __name__ == "__main__":
    main()
