//! Every link in README.md and docs/*.md resolves: a relative link names
//! a file or directory of the repository, and a `#fragment` names a
//! heading of the page it points to (GitHub's anchors). Links to other
//! sites are not fetched.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// The repository's root (this crate is `crates/weft`).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The markdown pages checked: README.md and every `.md` under docs/.
fn pages() -> Vec<PathBuf> {
    let mut v = vec![root().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    v.extend(docs);
    v
}

/// The text outside fenced code blocks and inline code spans (a link
/// inside code is not a link).
fn prose(md: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in md.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            out.push('\n');
            continue;
        }
        if fenced || line.starts_with("    ") {
            out.push('\n');
            continue;
        }
        let mut in_code = false;
        for c in line.chars() {
            if c == '`' {
                in_code = !in_code;
                continue;
            }
            if !in_code {
                out.push(c);
            }
        }
        out.push('\n');
    }
    out
}

/// The targets of the page's `[text](target)` and `![alt](target)` links.
fn links(md: &str) -> Vec<String> {
    let text = prose(md);
    let b = text.as_bytes();
    let mut v = Vec::new();
    let mut i = 0;
    while let Some(off) = text[i..].find("](") {
        let start = i + off + 2;
        let mut depth = 1;
        let mut end = start;
        while end < b.len() && depth > 0 {
            match b[end] {
                b'(' => depth += 1,
                b')' => depth -= 1,
                b'\n' => break,
                _ => {}
            }
            if depth > 0 {
                end += 1;
            }
        }
        if depth == 0 {
            // A title after the target (`(path "title")`) is not part of it.
            let target = text[start..end].split_whitespace().next().unwrap_or("");
            v.push(target.to_string());
        }
        i = end.max(start);
    }
    v
}

/// GitHub's anchor for a heading: lower case, letters, digits, `-` and
/// `_` kept, spaces made `-`, everything else dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a page's headings (a repeated heading's later copies
/// get `-1`, `-2`, … as on GitHub).
fn anchors(md: &str) -> HashSet<String> {
    let mut seen = HashSet::new();
    let mut fenced = false;
    for line in md.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let t = line.trim_start_matches('#');
        if t.len() == line.len() || !t.starts_with(' ') {
            continue;
        }
        let base = slug(&t.replace('`', ""));
        let mut a = base.clone();
        let mut n = 1;
        while seen.contains(&a) {
            a = format!("{base}-{n}");
            n += 1;
        }
        seen.insert(a);
    }
    seen
}

#[test]
fn every_link_in_the_docs_resolves() {
    let mut bad = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let md = std::fs::read_to_string(&page).expect("page");
        let name = page
            .strip_prefix(root())
            .unwrap_or(&page)
            .display()
            .to_string();
        for target in links(&md) {
            if target.is_empty()
                || target.contains("://")
                || target.starts_with("mailto:")
                || target.starts_with('<')
            {
                continue;
            }
            checked += 1;
            let (path, frag) = match target.split_once('#') {
                Some((p, f)) => (p, Some(f)),
                None => (target.as_str(), None),
            };
            let file = if path.is_empty() {
                page.clone()
            } else {
                page.parent().expect("dir").join(path)
            };
            if !file.exists() {
                bad.push(format!(
                    "{name}: link `{target}`: {} does not exist (fix the path or restore the file)",
                    file.display()
                ));
                continue;
            }
            if let Some(f) = frag {
                if file.extension().is_some_and(|x| x == "md") {
                    let there = std::fs::read_to_string(&file).expect("target page");
                    if !anchors(&there).contains(f) {
                        bad.push(format!(
                            "{name}: link `{target}`: no heading of {} has the anchor `#{f}`",
                            file.display()
                        ));
                    }
                }
            }
        }
    }
    assert!(checked > 0, "no link found: is the parser broken?");
    assert!(
        bad.is_empty(),
        "{} broken links:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

#[test]
fn the_parser_finds_links_and_anchors() {
    let md = "# Top\n\nSee [a](b.md#top-part) and ![p](x/y.png \"t\"), not `[c](d)`.\n\n    [e](f)\n\n## Top part (`weft-bench`)\n## Top\n";
    assert_eq!(links(md), vec!["b.md#top-part", "x/y.png"]);
    let a = anchors(md);
    assert!(a.contains("top"), "{a:?}");
    assert!(a.contains("top-part-weft-bench"), "{a:?}");
    assert!(a.contains("top-1"), "{a:?}");
}
