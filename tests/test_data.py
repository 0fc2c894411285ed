"""Data sets: real Fashion-MNIST files are read when present, the offline default otherwise."""

from __future__ import annotations

import gzip
import struct

import pytest
import torch

from dlperf.data import FASHION_MNIST_FILES, image_classification, read_idx


def write_idx(path, array: torch.Tensor, compress: bool) -> None:
    header = struct.pack(">HBB", 0, 0x08, array.dim()) + struct.pack(f">{array.dim()}I", *array.shape)
    payload = header + array.to(torch.uint8).numpy().tobytes()
    if compress:
        with gzip.open(str(path) + ".gz", "wb") as f:
            f.write(payload)
    else:
        path.write_bytes(payload)


def test_reads_fashion_mnist_files_when_present(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no real cache folder can interfere
    g = torch.Generator().manual_seed(0)
    images = {"train": torch.randint(0, 256, (12, 28, 28), generator=g), "test": torch.randint(0, 256, (5, 28, 28), generator=g)}
    labels = {"train": torch.arange(12) % 10, "test": torch.arange(5)}
    write_idx(tmp_path / FASHION_MNIST_FILES["train_images"], images["train"], compress=True)
    write_idx(tmp_path / FASHION_MNIST_FILES["train_labels"], labels["train"], compress=False)
    write_idx(tmp_path / FASHION_MNIST_FILES["test_images"], images["test"], compress=False)
    write_idx(tmp_path / FASHION_MNIST_FILES["test_labels"], labels["test"], compress=True)
    data = image_classification(batch_size=4, root=tmp_path)
    assert data.name == "Fashion-MNIST" and "Fashion-MNIST" in capsys.readouterr().out
    x_test, y_test = next(iter(data.test))
    assert torch.equal(x_test, images["test"][:4].float().div(255).unsqueeze(1))
    assert torch.equal(y_test, labels["test"][:4])
    assert len(data.train.dataset) == 12


def test_offline_default_is_the_digits_and_says_so(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("DLPERF_DATA", raising=False)
    data = image_classification(batch_size=64, root=tmp_path)
    out = capsys.readouterr().out
    assert data.name == "digits" and "Fashion-MNIST not found" in out and "digits" in out
    assert len(data.train.dataset) + len(data.test.dataset) == 1797
    x, y = next(iter(data.train))
    assert x.shape == (64, 1, 28, 28) and x.dtype == torch.float32 and 0 <= x.min() and x.max() <= 1
    assert y.dtype == torch.int64 and set(y.tolist()) <= set(range(10))
    again = image_classification(batch_size=64, root=tmp_path, verbose=False)
    assert torch.equal(next(iter(again.train))[0], x)  # seeded shuffling


def test_corrupt_idx_is_refused(tmp_path):
    bad = tmp_path / "bad"
    bad.write_bytes(struct.pack(">HBB", 0, 0x08, 1) + struct.pack(">I", 10) + b"\x00" * 3)
    with pytest.raises(ValueError, match="header says"):
        read_idx(bad)
