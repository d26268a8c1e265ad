"""The PyTorch programs the import tests bring in (tests/workload/programs), and variants of them."""

from pathlib import Path

PROGRAMS = Path(__file__).parent / "workload" / "programs"
AG = PROGRAMS / "ag_linear.py"


def program_variant(tmp_path: Path, name: str, old: str, new: str) -> Path:
    """ag_linear.py with `old` replaced by `new`, written as tmp_path/NAME.py."""
    text = AG.read_text()
    assert old in text, old
    path = tmp_path / f"{name}.py"
    path.write_text(text.replace(old, new))
    return path
