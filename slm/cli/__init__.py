"""Thin command-line entry points; Hydra lives here and in conf/."""
