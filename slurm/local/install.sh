#!/usr/bin/env bash
# Install a single-node SLURM (Debian slurm-wlm: slurmctld + slurmd + client tools) and munge.
#
#   sudo slurm/local/install.sh
#
# Only the packages are installed: no service is enabled or started here
# (slurm/local/start.sh starts private daemons with their own config under a
# temporary directory). Idempotent: exits at once when everything is present.
set -euo pipefail

need=(slurmctld slurmd sinfo sbatch munged)
missing=0
for cmd in "${need[@]}"; do
  command -v "$cmd" >/dev/null 2>&1 || PATH="$PATH:/usr/sbin" command -v "$cmd" >/dev/null 2>&1 || missing=1
done
if [ "$missing" = 0 ]; then
  echo "slurm/local/install.sh: slurm and munge already installed"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "slurm/local/install.sh: error: needs root (apt-get install slurm-wlm munge)" >&2
  exit 2
fi
export DEBIAN_FRONTEND=noninteractive
# policy-rc.d 101 = "do not start services from maintainer scripts" (containers have no init).
policy=/usr/sbin/policy-rc.d
created_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy" && created_policy=1
fi
trap '[ "$created_policy" = 1 ] && rm -f "$policy"' EXIT
apt-get update -qq
apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
echo "slurm/local/install.sh: installed $(dpkg-query -W -f='${Version}' slurmctld) (slurmctld), munge $(dpkg-query -W -f='${Version}' munge)"
