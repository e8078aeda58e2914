"""The programs under trainers/ (each module with a ``__main__`` block), for the tests that run
every one of them."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = sorted(
    path.stem
    for path in (ROOT / "trainers").glob("*.py")
    if 'if __name__ == "__main__"' in path.read_text()
)
