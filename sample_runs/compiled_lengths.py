"""Compiled model that recompiles: every batch has a new length and the model is compiled with dynamic=False.

Sequences of 8 to 64 tokens are padded to the longest in each batch, so the batches' second dimension changes
from one batch to the next. Compiled with `dynamic=False`, dynamo specialises each graph to one length and guards
on it: every new length fails the guard ("size mismatch at index 1") and compiles again, until dynamo's
recompile limit (8 per frame); past it the model runs eagerly for the rest of training, having paid for eight
compilations.

Typical fix, measured rather than assumed: `dynamic=None` (the default: a dimension seen to change is compiled
once, symbolically), `torch._dynamo.mark_dynamic(x, 1)`, or padding to a few fixed lengths. A symbolic graph is
not always faster than the eager fallback on small models: diagnose times both.
"""
import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Sentences(Dataset):
    def __init__(self, n, vocab=1000, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.lengths = torch.randint(8, 65, (n,), generator=g)
        self.tokens = torch.randint(1, vocab, (n, 64), generator=g)
        self.labels = torch.randint(0, 2, (n,), generator=g)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return self.tokens[i, : self.lengths[i]], self.labels[i]


def pad_to_longest(batch):
    longest = max(len(tokens) for tokens, _ in batch)
    tokens = torch.zeros(len(batch), longest, dtype=torch.long)
    for row, (t, _) in enumerate(batch):
        tokens[row, : len(t)] = t
    return tokens, torch.stack([label for _, label in batch])


class Classifier(nn.Module):
    def __init__(self, vocab=1000, width=64):
        super().__init__()
        self.embed = nn.Embedding(vocab, width, padding_idx=0)
        self.mix = nn.Sequential(nn.Linear(width, width), nn.GELU(), nn.Linear(width, width))
        self.head = nn.Linear(width, 2)

    def forward(self, tokens):
        h = self.mix(self.embed(tokens))
        return self.head(h.mean(dim=1))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--num-items", type=int, default=8192)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(0)
    loader = DataLoader(Sentences(args.num_items), batch_size=args.batch_size, shuffle=True,
                        collate_fn=pad_to_longest)
    model = torch.compile(Classifier().to(args.device), dynamic=False)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    for epoch in range(args.epochs):
        for step, (tokens, labels) in enumerate(loader):
            tokens, labels = tokens.to(args.device), labels.to(args.device)
            loss = nn.functional.cross_entropy(model(tokens), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step % 100 == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
