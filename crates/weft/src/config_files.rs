//! Where the configuration comes from, as tor reads it: the torrc
//! (`-f`), a defaults file (`--defaults-torrc`) whose options apply where
//! the torrc does not set them, options on the command line (`--ORPort
//! 9001`) that replace the files' values of the same option, and
//! `%include` of files and directories (a directory's files in name
//! order, skipping those starting with '.'; at most 31 levels deep, as
//! C Tor). Each option line keeps the file and line it came from, so
//! errors name them.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use crate::config::{parse_lines, Config, ConfigError};

/// How deep `%include` may nest (C Tor's `MAX_INCLUDE_RECURSION_LEVEL`).
const MAX_INCLUDE_DEPTH: usize = 31;

/// One option line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceLine {
    /// The file it came from ("command line" for arguments).
    pub file: String,
    /// Its line number (the argument's position on the command line).
    pub line: usize,
    /// The option's name as written.
    pub key: String,
    /// Its value (trimmed; may be empty).
    pub value: String,
}

/// Split one file's text into option lines (comments and blank lines
/// dropped). `%include` lines are kept as options named `%include`.
pub fn split(text: &str, file: &str) -> Result<Vec<SourceLine>, ConfigError> {
    let mut out = Vec::new();
    for (idx, raw) in text.lines().enumerate() {
        let l = raw.split('#').next().unwrap_or("").trim();
        if l.is_empty() {
            continue;
        }
        let (key, value) = match l.split_once(char::is_whitespace) {
            Some((k, v)) => (k, v.trim()),
            None => (l, ""),
        };
        out.push(SourceLine {
            file: file.to_string(),
            line: idx + 1,
            key: key.to_string(),
            value: value.to_string(),
        });
    }
    Ok(out)
}

/// Read `path` with its `%include`s followed.
fn read_with_includes(path: &Path, depth: usize) -> Result<Vec<SourceLine>, ConfigError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError::new(&name, 0, format!("cannot read: {e}")))?;
    let mut out = Vec::new();
    for sl in split(&text, &name)? {
        if !sl.key.eq_ignore_ascii_case("%include") {
            out.push(sl);
            continue;
        }
        if depth >= MAX_INCLUDE_DEPTH {
            return Err(ConfigError::new(
                &sl.file,
                sl.line,
                "%include nested too deeply (31 levels)",
            ));
        }
        if sl.value.is_empty() || sl.value.contains(['*', '?', '[']) {
            return Err(ConfigError::new(
                &sl.file,
                sl.line,
                "%include needs a file or directory (patterns are not supported)",
            ));
        }
        let mut target = PathBuf::from(&sl.value);
        if target.is_relative() {
            // Relative to the including file's directory.
            target = path.parent().unwrap_or(Path::new(".")).join(target);
        }
        if target.is_dir() {
            let mut files: Vec<PathBuf> = std::fs::read_dir(&target)
                .map_err(|e| ConfigError::new(&sl.file, sl.line, format!("%include: {e}")))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.is_file()
                        && !p
                            .file_name()
                            .is_some_and(|n| n.to_string_lossy().starts_with('.'))
                })
                .collect();
            files.sort();
            for f in files {
                out.extend(read_with_includes(&f, depth + 1)?);
            }
        } else {
            out.extend(read_with_includes(&target, depth + 1)?);
        }
    }
    Ok(out)
}

/// The configuration's sources.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    /// The torrc.
    pub torrc: PathBuf,
    /// The defaults file, if any.
    pub defaults: Option<PathBuf>,
    /// Start with an empty torrc when it is missing.
    pub ignore_missing_torrc: bool,
    /// `--Option value` pairs from the command line.
    pub command_line: Vec<(String, String)>,
}

/// Read every source and merge them as tor does: per option, the command
/// line's values, else the torrc's, else the defaults file's.
pub fn gather(src: &Sources) -> Result<Vec<SourceLine>, ConfigError> {
    let torrc = if src.ignore_missing_torrc && !src.torrc.exists() {
        Vec::new()
    } else {
        read_with_includes(&src.torrc, 0)?
    };
    let defaults = match &src.defaults {
        Some(d) => read_with_includes(d, 0)?,
        None => Vec::new(),
    };
    let command: Vec<SourceLine> = src
        .command_line
        .iter()
        .enumerate()
        .map(|(i, (k, v))| SourceLine {
            file: "command line".into(),
            line: i + 1,
            key: k.clone(),
            value: v.clone(),
        })
        .collect();
    let keys = |v: &[SourceLine]| -> HashSet<String> {
        v.iter().map(|l| l.key.to_ascii_lowercase()).collect()
    };
    let (in_torrc, in_command) = (keys(&torrc), keys(&command));
    let mut out: Vec<SourceLine> = defaults
        .into_iter()
        .filter(|l| {
            let k = l.key.to_ascii_lowercase();
            !in_torrc.contains(&k) && !in_command.contains(&k)
        })
        .collect();
    out.extend(
        torrc
            .into_iter()
            .filter(|l| !in_command.contains(&l.key.to_ascii_lowercase())),
    );
    out.extend(command);
    Ok(out)
}

/// Read and parse the configuration from its sources.
pub fn load(src: &Sources) -> Result<Config, ConfigError> {
    parse_lines(&gather(src)?, &src.torrc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn include_defaults_and_command_line() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir(d.join("torrc.d")).unwrap();
        std::fs::write(d.join("torrc.d/10-a"), "ContactInfo from include\n").unwrap();
        std::fs::write(d.join("torrc.d/.hidden"), "Bogus 1\n").unwrap();
        std::fs::write(d.join("torrc.d/20-b"), "%include ../more\n").unwrap();
        std::fs::write(d.join("more"), "Nickname fromMore\n").unwrap();
        std::fs::write(
            d.join("torrc"),
            "ORPort 127.0.0.1:9001\n%include torrc.d\nBandwidthRate 1 MB\n",
        )
        .unwrap();
        std::fs::write(
            d.join("defaults"),
            "Nickname defaultNick\nDataDirectory /tmp/x\nBandwidthRate 2 MB\n",
        )
        .unwrap();
        let src = Sources {
            torrc: d.join("torrc"),
            defaults: Some(d.join("defaults")),
            ignore_missing_torrc: false,
            command_line: vec![("ORPort".into(), "127.0.0.1:9002".into())],
        };
        let lines = gather(&src).unwrap();
        let kv: Vec<(&str, &str)> = lines
            .iter()
            .map(|l| (l.key.as_str(), l.value.as_str()))
            .collect();
        assert_eq!(
            kv,
            vec![
                ("DataDirectory", "/tmp/x"),
                ("ContactInfo", "from include"),
                ("Nickname", "fromMore"),
                ("BandwidthRate", "1 MB"),
                ("ORPort", "127.0.0.1:9002"),
            ]
        );
        let cfg = load(&src).unwrap();
        assert_eq!(cfg.relay.nickname, "fromMore");
        assert_eq!(cfg.relay.or_listen.port(), 9002);
        // Errors name the included file and line.
        std::fs::write(d.join("more"), "Nickname ok\nFrobnicate 1\n").unwrap();
        let e = load(&src).unwrap_err().to_string();
        assert!(e.contains("more:2:") && e.contains("Frobnicate"), "{e}");
        // A loop of includes stops at the depth limit.
        std::fs::write(d.join("more"), "%include more\n").unwrap();
        let e = load(&src).unwrap_err().to_string();
        assert!(e.contains("nested too deeply"), "{e}");
        std::fs::write(d.join("torrc"), "%include /nonexistent/x\n").unwrap();
        assert!(load(&src).unwrap_err().to_string().contains("cannot read"));
    }
}
