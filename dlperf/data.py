"""Data sets for the book's training experiments: nothing is ever downloaded.

The d2l book trains on Fashion-MNIST, fetched from the internet on first use.
This course builds and runs offline, so :func:`image_classification`:

1. reads **Fashion-MNIST** from local files when they are present (the four
   ``*-idx?-ubyte[.gz]`` files of the original distribution, in ``root``, in
   ``$DLPERF_DATA/fashion-mnist`` or in ``~/.cache/dlperf/fashion-mnist``);
2. otherwise uses the **handwritten digits** that scikit-learn ships inside its
   package (1,797 real 8x8 images of the digits 0-9, from the UCI repository),
   scaled up to 28x28 so that models written for Fashion-MNIST run unchanged.

It prints which one it used, and the result records it (``ImageData.name``), so
no reader mistakes one for the other.
"""

from __future__ import annotations

import gzip
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

__all__ = ["FASHION_MNIST_FILES", "ImageData", "find_fashion_mnist", "image_classification", "read_idx"]

FASHION_MNIST_FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}


@dataclass
class ImageData:
    """Train and test loaders of one image classification data set."""

    name: str
    train: DataLoader
    test: DataLoader
    num_classes: int
    image_shape: tuple[int, int, int]
    source: str

    def __str__(self) -> str:
        return (
            f"{self.name}: {len(self.train.dataset)} training and {len(self.test.dataset)} test images "
            f"of shape {self.image_shape}, {self.num_classes} classes ({self.source})"
        )


def read_idx(path: str | Path) -> torch.Tensor:
    """Read one file in the IDX format of (Fashion-)MNIST, gzipped or not.

    The header is two zero bytes, a type code (0x08 = unsigned byte) and the
    number of dimensions, then one big-endian int32 per dimension.
    """
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        data = f.read()
    zero, dtype_code, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype_code != 0x08:
        raise ValueError(f"{path}: not an IDX file of unsigned bytes (header {data[:4]!r})")
    shape = struct.unpack(f">{ndim}I", data[4 : 4 + 4 * ndim])
    body = data[4 + 4 * ndim :]
    expected = 1
    for s in shape:
        expected *= s
    if len(body) != expected:
        raise ValueError(f"{path}: header says {shape} ({expected} bytes), file has {len(body)}")
    return torch.frombuffer(bytearray(body), dtype=torch.uint8).reshape(shape)


def _candidates(root: str | Path | None) -> list[Path]:
    out = []
    if root is not None:
        out.append(Path(root))
    if os.environ.get("DLPERF_DATA"):
        out.append(Path(os.environ["DLPERF_DATA"]) / "fashion-mnist")
    out.append(Path.home() / ".cache" / "dlperf" / "fashion-mnist")
    return out


def find_fashion_mnist(root: str | Path | None = None) -> dict[str, Path] | None:
    """Paths of the four Fashion-MNIST files in the first folder that has all of them."""
    for folder in _candidates(root):
        found = {}
        for key, stem in FASHION_MNIST_FILES.items():
            for name in (stem, stem + ".gz"):
                if (folder / name).exists():
                    found[key] = folder / name
                    break
        if len(found) == len(FASHION_MNIST_FILES):
            return found
    return None


def _loaders(x_train, y_train, x_test, y_test, batch_size, seed):
    generator = torch.Generator().manual_seed(seed)
    train = DataLoader(TensorDataset(x_train, y_train), batch_size=batch_size, shuffle=True, generator=generator)
    test = DataLoader(TensorDataset(x_test, y_test), batch_size=batch_size, shuffle=False)
    return train, test


def _digits(size: int, test_fraction: float, seed: int):
    try:
        from sklearn.datasets import load_digits
    except ImportError as exc:  # pragma: no cover - scikit-learn is a dependency
        raise ImportError("the offline data set needs scikit-learn (pip install scikit-learn)") from exc
    digits = load_digits()
    x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0  # pixel values 0..16
    if size != 8:
        x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False)
    y = torch.tensor(digits.target, dtype=torch.int64)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    n_test = int(round(len(y) * test_fraction))
    test_idx, train_idx = order[:n_test], order[n_test:]
    return x[train_idx], y[train_idx], x[test_idx], y[test_idx]


def image_classification(
    batch_size: int = 256,
    *,
    root: str | Path | None = None,
    size: int = 28,
    test_fraction: float = 0.2,
    seed: int = 0,
    verbose: bool = True,
) -> ImageData:
    """Fashion-MNIST if its files are here, else scikit-learn's digits; says which.

    Images are float32 in [0, 1] of shape ``(1, size, size)``; labels are int64.
    ``size`` applies to the digits (8x8 originals, scaled with bilinear
    interpolation); Fashion-MNIST is always 28x28.  Shuffling is seeded.
    """
    files = find_fashion_mnist(root)
    if files is not None:
        x_train = read_idx(files["train_images"]).float().div_(255).unsqueeze(1)
        y_train = read_idx(files["train_labels"]).long()
        x_test = read_idx(files["test_images"]).float().div_(255).unsqueeze(1)
        y_test = read_idx(files["test_labels"]).long()
        train, test = _loaders(x_train, y_train, x_test, y_test, batch_size, seed)
        data = ImageData("Fashion-MNIST", train, test, 10, (1, 28, 28), f"local files in {files['train_images'].parent}")
    else:
        x_train, y_train, x_test, y_test = _digits(size, test_fraction, seed)
        train, test = _loaders(x_train, y_train, x_test, y_test, batch_size, seed)
        looked = ", ".join(str(p) for p in _candidates(root))
        data = ImageData(
            "digits",
            train,
            test,
            10,
            (1, size, size),
            f"scikit-learn's 8x8 handwritten digits scaled to {size}x{size}; Fashion-MNIST not found in {looked}",
        )
    if verbose:
        print(f"Data: {data}")
    return data
