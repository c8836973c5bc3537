//! weft-proto is sans-IO: it reads no clock. Time comes in as an argument
//! (the link handshake's `now`, a half's `now_ns`), so its state machines
//! run the same in tests and on a relay. This reads its sources (tests and
//! the fuzzing helpers aside) for a clock read.

use std::path::Path;

fn rs_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn weft_proto_reads_no_clock() {
    let mut files = Vec::new();
    rs_files(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    assert!(files.len() > 10, "found the sources");
    let mut bad = Vec::new();
    for f in files {
        let name = f.file_name().unwrap().to_string_lossy();
        if name == "tests.rs" || name == "fuzzing.rs" {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap();
        // Code after a `#[cfg(test)]` module starts is test code.
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        for (i, line) in code.lines().enumerate() {
            let l = line.trim_start();
            if l.starts_with("//") {
                continue;
            }
            if l.contains("SystemTime::now") || l.contains("Instant::now") {
                bad.push(format!("{}:{}: {}", f.display(), i + 1, l));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "clock reads in weft-proto:\n{}",
        bad.join("\n")
    );
}
