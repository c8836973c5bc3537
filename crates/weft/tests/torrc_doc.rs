//! docs/torrc.md lists exactly the options of weft's option table, with its defaults.
//!
//! Every table row of docs/torrc.md whose first cell is a backticked
//! option name (`` `BandwidthRate` ``) is one option. The test checks that
//! each option of [`weft::config_names::OPTIONS`] (what the parser records,
//! GETCONF and `config/names` answer) has exactly one row, that every row
//! names an option of that table, and that the row's default cell is the
//! table's default in backticks, or `(none)` where the default is empty.

use std::collections::BTreeMap;
use std::path::PathBuf;

use weft::config_names::OPTIONS;

/// The doc, relative to this crate.
const DOC: &str = "../../docs/torrc.md";

/// A table row's cells (split on `|` outside backticks and not escaped as
/// `\|`), trimmed, without the empty cells before the first and after the
/// last `|`.
fn cells(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_code = false;
    let mut chars = line.trim().chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => cur.push(chars.next().unwrap_or('|')),
            '`' => {
                in_code = !in_code;
                cur.push(c);
            }
            '|' if !in_code => out.push(std::mem::take(&mut cur).trim().to_string()),
            _ => cur.push(c),
        }
    }
    out.push(cur.trim().to_string());
    if out.first().is_some_and(|c| c.is_empty()) {
        out.remove(0);
    }
    if out.last().is_some_and(|c| c.is_empty()) {
        out.pop();
    }
    out
}

/// The option named by a first cell such as `` `BandwidthRate` ``.
fn option_name(cell: &str) -> Option<&str> {
    let name = cell.strip_prefix('`')?.strip_suffix('`')?;
    (!name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
        .then_some(name)
}

/// What the default cell must say for a default from OPTIONS.
fn expected_default(default: &str) -> String {
    if default.is_empty() {
        "(none)".to_string()
    } else {
        format!("`{default}`")
    }
}

#[test]
fn torrc_doc_matches_the_option_table() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(DOC);
    let doc = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    // name -> (line number, default cell) for every option row.
    let mut rows: BTreeMap<String, Vec<(usize, String)>> = BTreeMap::new();
    let mut problems = Vec::new();
    for (i, line) in doc.lines().enumerate() {
        if !line.trim_start().starts_with('|') {
            continue;
        }
        let c = cells(line);
        let Some(name) = c.first().and_then(|f| option_name(f)) else {
            continue;
        };
        if c.len() != 3 {
            problems.push(format!(
                "docs/torrc.md:{}: the row of `{name}` has {} cells; give it three: | option | default | what weft does / differs from tor |",
                i + 1,
                c.len()
            ));
        }
        let default = c.get(1).cloned().unwrap_or_default();
        rows.entry(name.to_string())
            .or_default()
            .push((i + 1, default));
    }
    for o in OPTIONS {
        match rows.get(o.name).map(Vec::as_slice) {
            None | Some([]) => problems.push(format!(
                "option `{}` is in weft's OPTIONS (crates/weft/src/config_names.rs) but has no row in docs/torrc.md: add `| `{}` | {} | ... |` to the table of its area",
                o.name,
                o.name,
                expected_default(o.default)
            )),
            Some([(line, default)]) => {
                let want = expected_default(o.default);
                if *default != want {
                    problems.push(format!(
                        "docs/torrc.md:{line}: option `{}` has default cell '{default}', but OPTIONS says {want}: put {want} in its default cell (or fix the default in crates/weft/src/config_names.rs if the code is wrong)",
                        o.name
                    ));
                }
            }
            Some(more) => problems.push(format!(
                "option `{}` has {} rows in docs/torrc.md (lines {:?}): keep exactly one",
                o.name,
                more.len(),
                more.iter().map(|(l, _)| *l).collect::<Vec<_>>()
            )),
        }
    }
    for (name, at) in &rows {
        if !OPTIONS.iter().any(|o| o.name == name) {
            let hint = OPTIONS
                .iter()
                .find(|o| o.name.eq_ignore_ascii_case(name))
                .map(|o| format!(" (the canonical spelling is `{}`)", o.name))
                .unwrap_or_default();
            problems.push(format!(
                "docs/torrc.md:{}: `{name}` is not in weft's OPTIONS (crates/weft/src/config_names.rs){hint}: remove the row, fix its spelling, or add the option to OPTIONS",
                at[0].0
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "docs/torrc.md and OPTIONS disagree ({} problems):\n{}",
        problems.len(),
        problems.join("\n")
    );
}
