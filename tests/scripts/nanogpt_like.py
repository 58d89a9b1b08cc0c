"""A GPT training loop in the style of nanoGPT's train.py, written for the tests: no DataLoader (batches sliced at
random from a np.memmap of tokens), `loss / gradient_accumulation_steps` with backward() per micro-step and one
optimizer step per iteration, and its own clock: "iter N: loss L, time T ms" per iteration, as nanoGPT prints it.
Usage: python nanogpt_like.py [--gradient-accumulation-steps 4] [--max-iters 40]"""
import argparse
import os
import tempfile
import time

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

VOCAB, BLOCK = 256, 64


def token_file(n_tokens: int) -> str:
    """The training tokens, written once to a temporary file (nanoGPT's data/*/train.bin)."""
    path = os.path.join(tempfile.gettempdir(), f"diagnose-nanogpt-tokens-{n_tokens}.bin")
    if not os.path.exists(path):
        tokens = np.random.default_rng(0).integers(0, VOCAB, n_tokens, dtype=np.uint16)
        partial = f"{path}.{os.getpid()}"
        tokens.tofile(partial)
        os.replace(partial, path)
    return path


def get_batch(path: str, batch_size: int):
    data = np.memmap(path, dtype=np.uint16, mode="r")  # re-opened per batch, as nanoGPT does (avoids a leak)
    ix = torch.randint(len(data) - BLOCK - 1, (batch_size,))
    x = torch.stack([torch.from_numpy(data[i:i + BLOCK].astype(np.int64)) for i in ix])
    y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + BLOCK].astype(np.int64)) for i in ix])
    return x, y


class GPT(nn.Module):
    def __init__(self, width: int = 128, layers: int = 2, heads: int = 4):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, width)
        self.pos = nn.Embedding(BLOCK, width)
        layer = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(width, VOCAB, bias=False)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(BLOCK), persistent=False)

    def forward(self, idx, targets):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        logits = self.head(self.blocks(x, mask=self.mask, is_causal=True))
        return logits, F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gradient-accumulation-steps", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-iters", type=int, default=40)
    parser.add_argument("--compile", action="store_true", help="torch.compile the model (nanoGPT's default)")
    args = parser.parse_args()
    torch.manual_seed(1337)
    torch.set_num_threads(1)
    path = token_file(200_000)
    model = GPT()
    if args.compile:
        model = torch.compile(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4)
    x, y = get_batch(path, args.batch_size)
    t0 = time.time()
    for iter_num in range(args.max_iters):
        for _ in range(args.gradient_accumulation_steps):
            _, loss = model(x, y)
            loss = loss / args.gradient_accumulation_steps
            x, y = get_batch(path, args.batch_size)  # prefetch the next batch while... (as nanoGPT does)
            loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        t1 = time.time()
        dt, t0 = t1 - t0, t1
        print(f"iter {iter_num}: loss {loss.item() * args.gradient_accumulation_steps:.4f}, time {dt * 1000:.2f}ms",
              flush=True)


if __name__ == "__main__":
    main()
