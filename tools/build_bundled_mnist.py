"""Build assets/mnist_subset.npz: the offline default dataset shipped with Blink.

A class-balanced subset (1,000 images per digit) of the real MNIST training split, read from
the original IDX files. Run from the project root:
    python tools/build_bundled_mnist.py --mnist ../shared/data/mnist
"""
import argparse
import gzip
import os

import numpy as np


def read_idx(path: str) -> np.ndarray:
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(shape)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mnist", default="../shared/data/mnist")
    parser.add_argument("--per-class", type=int, default=1000)
    parser.add_argument("--out", default="assets/mnist_subset.npz")
    args = parser.parse_args()
    images = read_idx(os.path.join(args.mnist, "train-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(args.mnist, "train-labels-idx1-ubyte.gz"))
    rng = np.random.default_rng(0)
    keep = np.sort(np.concatenate([rng.choice(np.flatnonzero(labels == d), args.per_class, replace=False)
                                   for d in range(10)]))
    np.savez_compressed(args.out, images=images[keep], labels=labels[keep])
    print(f"wrote {args.out}: {len(keep)} images, {os.path.getsize(args.out) / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
