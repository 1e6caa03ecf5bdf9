"""Conversion between slm models and other libraries' models (see `slm.interop.hf` for transformers)."""
