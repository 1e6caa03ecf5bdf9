#!/usr/bin/env bash
# Install a single-node Slurm (with accounting) from Debian packages, if not installed yet. Needs root.
#   slurmctld slurmd slurm-client munge: the cluster; slurmdbd mariadb-server: accounting, so that
#   `sacct` answers and submitit reports a dead job instead of waiting for it.
set -euo pipefail
need=()
for bin in slurmctld slurmd sbatch munged slurmdbd mariadbd; do command -v "$bin" >/dev/null || need+=("$bin"); done
if [ ${#need[@]} -eq 0 ]; then echo "[slurm install] already installed: $(slurmctld -V)"; exit 0; fi
[ "$(id -u)" = 0 ] || { echo "[slurm install] missing ${need[*]}; run as root (apt-get)" >&2; exit 1; }
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge slurmdbd mariadb-server >/dev/null
echo "[slurm install] installed $(slurmctld -V)"
