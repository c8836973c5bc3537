//! Replays the committed cargo-fuzz corpora of this crate's network parsers
//! (`fuzz/corpus/dir_http`, `fuzz/corpus/dir_request`, `fuzz/corpus/dir_documents`,
//! `fuzz/corpus/exit_policy`, `fuzz/corpus/consdiff`, `fuzz/corpus/hs_descriptor`) on stable.

use std::path::Path;

fn each_seed(target: &str, f: impl Fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        f(&std::fs::read(e.unwrap().path()).unwrap());
        n += 1;
    }
    assert!(n > 0, "empty corpus {}", dir.display());
}

#[test]
fn dir_http_corpus() {
    each_seed("dir_http", weft_dir::fuzzing::http_response);
}

#[test]
fn dir_request_corpus() {
    each_seed("dir_request", weft_dir::fuzzing::dir_request);
}

#[test]
fn dir_documents_corpus() {
    each_seed("dir_documents", weft_dir::fuzzing::directory_documents);
}

#[test]
fn exit_policy_corpus() {
    each_seed("exit_policy", weft_dir::fuzzing::exit_policy);
}

#[test]
fn consdiff_corpus() {
    each_seed("consdiff", weft_dir::fuzzing::consdiff);
}

#[test]
fn hs_descriptor_corpus() {
    each_seed("hs_descriptor", weft_dir::fuzzing::hs_descriptor);
}
