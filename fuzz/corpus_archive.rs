//! Reads a committed fuzz corpus, `fuzz/corpus/<target>.tar.gz` (one
//! gzip'd tar per target; `scripts/fuzz-corpus.sh` packs and unpacks them
//! for cargo fuzz). Included with `#[path]` by the replay tests of each
//! crate whose parsers have fuzz targets (`crates/*/tests/fuzz_corpus.rs`,
//! weft-relay's control tests), which need `tar` and `flate2` as
//! dev-dependencies.

use std::path::{Path, PathBuf};

/// The archive of `target`'s corpus.
pub fn archive(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(format!("{target}.tar.gz"))
}

/// Every input of `target`'s corpus, with its name, in the archive's
/// (sorted) order. Panics (failing the test) on a missing or damaged
/// archive or an empty corpus.
pub fn inputs(target: &str) -> Vec<(String, Vec<u8>)> {
    use std::io::Read;
    let path = archive(target);
    let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(file));
    let mut out = Vec::new();
    for entry in tar
        .entries()
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    {
        let mut entry = entry.unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let name = entry.path().unwrap().display().to_string();
        let mut data = Vec::new();
        entry
            .read_to_end(&mut data)
            .unwrap_or_else(|e| panic!("{}: {name}: {e}", path.display()));
        out.push((name, data));
    }
    assert!(!out.is_empty(), "empty corpus {}", path.display());
    out
}
