"""Train the MNIST classifier behind core/quality.py and write it to assets/.

Trains core.quality.MnistNet on the full MNIST training split (60k, IDX files), evaluates on
the t10k split, and writes
    assets/mnist_classifier.safetensors   weights (no pickle: loaded with safetensors)
    assets/mnist_classifier.json          architecture name, test accuracy, how it was trained
Run from the project root (two CPU cores: a few minutes):
    python tools/train_classifier.py --mnist ../shared/data/mnist
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from core.quality import MnistNet, to_classifier_input  # noqa: E402
from tools.build_bundled_mnist import read_idx  # noqa: E402


def shifted(x: torch.Tensor, generator: torch.Generator, pad: int = 2) -> torch.Tensor:
    """Random translations of up to `pad` pixels: generated digits are not centred as
    precisely as MNIST's, and the classifier should not punish that."""
    n = x.shape[0]
    padded = F.pad(x, (pad, pad, pad, pad), value=-1.0)
    dy = torch.randint(0, 2 * pad + 1, (n,), generator=generator)
    dx = torch.randint(0, 2 * pad + 1, (n,), generator=generator)
    rows = (dy[:, None] + torch.arange(28))[:, :, None].expand(n, 28, 28)
    cols = (dx[:, None] + torch.arange(28))[:, None, :].expand(n, 28, 28)
    return padded[torch.arange(n)[:, None, None], 0, rows, cols][:, None]


@torch.no_grad()
def accuracy(net: MnistNet, images: torch.Tensor, labels: torch.Tensor) -> float:
    net.eval()
    correct = sum(int((net(x).argmax(1) == y).sum()) for x, y in zip(images.split(1000), labels.split(1000)))
    return correct / len(labels)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mnist", default="../shared/data/mnist")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="assets/mnist_classifier.safetensors")
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)

    train_x = to_classifier_input(read_idx(os.path.join(args.mnist, "train-images-idx3-ubyte.gz")))
    train_y = torch.from_numpy(read_idx(os.path.join(args.mnist, "train-labels-idx1-ubyte.gz")).astype(np.int64))
    test_x = to_classifier_input(read_idx(os.path.join(args.mnist, "t10k-images-idx3-ubyte.gz")))
    test_y = torch.from_numpy(read_idx(os.path.join(args.mnist, "t10k-labels-idx1-ubyte.gz")).astype(np.int64))

    net = MnistNet()
    opt = torch.optim.AdamW(net.parameters(), lr=args.lr, weight_decay=1e-4)
    steps_per_epoch = len(train_x) // args.batch
    # One-cycle: fast convergence in a few epochs, which matters when the build runs on 2 cores.
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, args.lr, total_steps=args.epochs * steps_per_epoch)
    t0 = time.perf_counter()
    for epoch in range(args.epochs):
        net.train()
        order = torch.randperm(len(train_x), generator=gen)
        for i in range(steps_per_epoch):
            idx = order[i * args.batch:(i + 1) * args.batch]
            loss = F.cross_entropy(net(shifted(train_x[idx], gen)), train_y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
        acc = accuracy(net, test_x, test_y)
        print(f"epoch {epoch + 1}/{args.epochs}: loss {loss.item():.4f}, t10k accuracy {acc:.4%}, "
              f"{time.perf_counter() - t0:.0f} s", flush=True)

    from safetensors.torch import save_file
    state = {k: v.detach().contiguous() for k, v in net.state_dict().items()}
    save_file(state, args.out)
    meta = {
        "architecture": "core.quality.MnistNet", "input": "(N, 1, 28, 28) float in [-1, 1]",
        "features": MnistNet.FEATURES, "parameters": sum(p.numel() for p in net.parameters()),
        "test_accuracy": round(acc, 5), "test_split": "MNIST t10k (10,000 images)",
        "train_split": "MNIST train (60,000 images), random shifts of up to 2 px",
        "epochs": args.epochs, "batch": args.batch, "optimizer": f"AdamW one-cycle max lr {args.lr}",
        "seed": args.seed, "train_seconds": round(time.perf_counter() - t0, 1),
        "torch": torch.__version__,
    }
    with open(os.path.splitext(args.out)[0] + ".json", "w") as f:
        json.dump(meta, f, indent=2)
    print(f"wrote {args.out} ({os.path.getsize(args.out) / 1e3:.0f} kB): t10k accuracy {acc:.4%}")


if __name__ == "__main__":
    main()
