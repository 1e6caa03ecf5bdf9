"""A verifiable function-calling task, shipped and offline (docs/toolcall.md). Standard library only, so every layer
may use it: tools (the catalogue), items (the generator and its splits), verifier (scores a completion), corruptions
(controlled wrong calls), files (the files `slm-toolcall` writes), bfcl (a reader of BFCL-format items)."""
