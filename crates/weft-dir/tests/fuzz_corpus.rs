//! Replays the committed cargo-fuzz corpora of this crate's network parsers
//! (`fuzz/corpus/<target>.tar.gz` for dir_http, dir_request, dir_documents,
//! exit_policy, consdiff and hs_descriptor) on stable.

#[path = "../../../fuzz/corpus_archive.rs"]
mod corpus_archive;

fn each_seed(target: &str, f: impl Fn(&[u8])) {
    for (_, data) in corpus_archive::inputs(target) {
        f(&data);
    }
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
