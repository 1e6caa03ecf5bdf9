"""slm: a harness for finding which architecture a small language model should have."""

__version__ = "0.1.0"
