#!/usr/bin/env bash
# The committed fuzz corpora are one gzip'd tar per target,
# fuzz/corpus/<target>.tar.gz (thousands of small inputs as files made most
# of a checkout's size on disk). The replay tests (crates/*/tests/fuzz_corpus.rs,
# via fuzz/corpus_archive.rs) read the archives directly; cargo fuzz wants
# directories:
#   scripts/fuzz-corpus.sh unpack [TARGET...]  archives -> fuzz/corpus/<target>/ (not committed)
#   scripts/fuzz-corpus.sh pack [TARGET...]    fuzz/corpus/<target>/ -> its archive, byte for
#                                              byte the same for the same inputs
# Without targets: every archive (unpack) or every directory (pack).
set -euo pipefail
cd "$(dirname "$0")/../fuzz/corpus"
verb=${1:-}
shift || true
targets=("$@")
case "$verb" in
  unpack)
    if [ ${#targets[@]} -eq 0 ]; then
      for a in *.tar.gz; do targets+=("${a%.tar.gz}"); done
    fi
    for t in "${targets[@]}"; do
      mkdir -p "$t"
      tar -xzf "$t.tar.gz" -C "$t"
      echo "$t: $(find "$t" -type f | wc -l) inputs in fuzz/corpus/$t/"
    done
    ;;
  pack)
    if [ ${#targets[@]} -eq 0 ]; then
      for d in */; do targets+=("${d%/}"); done
    fi
    for t in "${targets[@]}"; do
      # Sorted names, no owners or times: the same inputs give the same bytes.
      (cd "$t" && find . -type f -printf '%P\n' | LC_ALL=C sort |
        tar --owner=0 --group=0 --numeric-owner --mtime=@0 --mode=0644 -cf - -T - |
        gzip -n -9) >"$t.tar.gz.new"
      mv "$t.tar.gz.new" "$t.tar.gz"
      echo "$t: $(find "$t" -type f | wc -l) inputs in fuzz/corpus/$t.tar.gz"
    done
    ;;
  *)
    echo "usage: $0 unpack|pack [TARGET...]" >&2
    exit 2
    ;;
esac
