//! Replays the committed cargo-fuzz corpus of the torrc parser
//! (`fuzz/corpus/torrc.tar.gz`) on stable, and checks the seeds mean what they say.

use std::path::Path;

#[path = "../../../fuzz/corpus_archive.rs"]
mod corpus_archive;

#[test]
fn torrc_corpus() {
    let mut ok = 0;
    let mut n = 0;
    for (name, data) in corpus_archive::inputs("torrc") {
        let text = String::from_utf8_lossy(&data).into_owned();
        if weft::config::parse(&text, Path::new(&name)).is_ok() {
            ok += 1;
        }
        n += 1;
    }
    assert!(n >= 3 && ok >= 1, "{n} seeds, {ok} valid");
}
