"""Thin command-line entry points; Hydra lives here and in conf/."""

from slm.omp_wait import prefer_short_spin

prefer_short_spin()  # before any command imports torch: waiting CPU threads sleep soon (slm/omp_wait.py)
