"""Where the tests find the repository and their recorded data, from whichever folder of tests/
they sit in (the test files moved into rooms; a path counted up from a test file breaks when it moves)."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
DATA = TESTS / "data"
