"""Argument types the command-line tools share, so that each refuses a bad value the same way: argparse prints
``argument --NAME: <what was expected>`` and exits with status 2, before any work."""

from __future__ import annotations

import argparse
from pathlib import Path


def folder(text: str) -> Path:
    """An output folder: not an empty string (which would write into the working directory without a word)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a folder to write into, got an empty name")
    return Path(text)


def file_in_the_way(path: Path) -> Path | None:
    """The first of ``path``'s parents that exists and is not a folder (a file where a folder must be), or None:
    found before any work, where ``mkdir`` would say only "File exists" or "Not a directory", and only after it."""
    return next((a for a in reversed(Path(path).parents) if a.exists() and not a.is_dir()), None)


def stem(text: str) -> str:
    """A file name without a folder (``--name``: the tool adds ``.json`` and puts it in ``--out``)."""
    if not text.strip() or Path(text).name != text or text in (".", ".."):
        raise argparse.ArgumentTypeError(f"expected a file name without a folder (the folder is --out), got {text!r}")
    return text


def positive_int(text: str) -> int:
    """An integer > 0."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if n <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return n


def positive_ints(text: str) -> tuple[int, ...]:
    """A comma-separated list of one or more integers > 0 (``64,128``)."""
    parts = [p.strip() for p in text.split(",")]
    if not text.strip() or not all(parts):
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers, got {text!r}")
    try:
        return tuple(positive_int(p) for p in parts)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers, got {text!r}") from None


def choices(*allowed: str):
    """A comma-separated list of one or more of ``allowed`` (``fwd,fwd_bwd``)."""
    def parse(text: str) -> tuple[str, ...]:
        picked = tuple(p.strip() for p in text.split(","))
        unknown = [p for p in picked if p not in allowed]
        if not text.strip() or unknown:
            raise argparse.ArgumentTypeError(f"expected some of {', '.join(allowed)} (comma-separated), got {text!r}")
        return picked
    return parse
