#!/usr/bin/env bash
# Makes .h200/pydocs/, the English text the training-quality run trains on (the H200 has no network):
# Python 3.11's documentation, the reST sources of Debian's python3.11-doc (prose with code examples,
# PSF licence), tokenised with GPT-2's BPE into llm.c shards by `euler data prepare`.
# Run it HERE (the CPU machine), from the repository root, once: about 30 s (the 12.6 MB package
# download, 11 MB of text, tokenising). Result: .h200/pydocs/pydocs_train_000000.bin (3,378,512 tokens,
# 6.8 MB), pydocs_val_000000.bin (175,715 tokens, 0.35 MB), meta.json; 7.2 MB in all. .h200/ is
# git-ignored and is what the lead carries to the device.
#   bash bench/device/train_data.sh            (PY=path/to/python if not .venv/bin/python)
set -euo pipefail
PY=${PY:-.venv/bin/python}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && { apt-get download -qq python3.11-doc 2>/dev/null || { apt-get update -qq && apt-get download -qq python3.11-doc; }; })
dpkg -x "$tmp"/python3.11-doc_*.deb "$tmp/root"
src="$tmp/root/usr/share/doc/python3.11/html/_sources"
mapfile -t files < <(find "$src" -name '*.rst.txt' | LC_ALL=C sort)
rm -rf .h200/pydocs
"$PY" -m euler_core.cli data prepare --input "${files[@]}" --tokenizer gpt2 --out .h200/pydocs --name pydocs \
  --val-fraction 0.05 --no-progress
du -sh .h200/pydocs
