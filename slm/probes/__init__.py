"""Synthetic probes (MAD, arXiv 2403.17844): six tiny tasks as prompt/completion records (docs/probes.md). Standard
library only: tasks (the generators), files (the files `slm-probes` writes)."""
