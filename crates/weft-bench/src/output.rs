//! What the CLI's modes share: the repository they write into, the command
//! line they record, and the output of the network modes (`e2e`, `exit`):
//! a JSON file in bench/results, the Markdown table, the plots.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use crate::report;

/// Where the network modes (e2e, exit) take weft from and put results.
#[derive(Args, Debug)]
pub struct NetworkOutput {
    /// weft binary.
    #[arg(long, default_value = "target/release/weft")]
    pub weft: PathBuf,
    /// Results directory.
    #[arg(long, default_value = "bench/results")]
    pub results: PathBuf,
    /// Tag added to the result file name (`<date>-<mode>-<tag>.json`).
    #[arg(long)]
    pub tag: Option<String>,
    /// Skip the plots.
    #[arg(long)]
    pub no_plots: bool,
}

impl NetworkOutput {
    /// Write the JSON (`kind`, procedure, results and `extra`'s fields),
    /// print the table, draw the plots.
    #[allow(clippy::too_many_arguments)]
    pub fn save(
        &self,
        kind: &str,
        date: &str,
        stamp: &str,
        procedure: &impl serde::Serialize,
        results: &[crate::e2e::E2eResult],
        extra: serde_json::Value,
        md: &str,
    ) -> Result<()> {
        let mut body = serde_json::json!({
            "procedure": procedure,
            "results": results,
        });
        if let (Some(d), serde_json::Value::Object(e)) = (body.as_object_mut(), extra) {
            d.extend(e);
        }
        let path = self.write(kind, date, stamp, body, md)?;
        if !self.no_plots {
            for f in report::plot(&repo_root(), &path, &path.with_extension(""))? {
                println!("plot: {}", f.display());
            }
        }
        Ok(())
    }
}

impl NetworkOutput {
    /// Write `<results>/<date>-<kind>[-<tag>].json`: `kind`, the date,
    /// the command line, the machine and `body`'s fields; print the table
    /// `md` and where the file went. Returns its path.
    pub fn write(
        &self,
        kind: &str,
        date: &str,
        stamp: &str,
        body: serde_json::Value,
        md: &str,
    ) -> Result<PathBuf> {
        let path = self.results.join(format!(
            "{date}-{kind}{}.json",
            self.tag
                .as_ref()
                .map(|t| format!("-{t}"))
                .unwrap_or_default()
        ));
        let mut doc = serde_json::json!({
            "kind": kind,
            "date": stamp,
            "command": command_line(),
            "machine": report::Machine::read(),
        });
        if let (Some(d), serde_json::Value::Object(e)) = (doc.as_object_mut(), body) {
            d.extend(e);
        }
        report::write_json(&path, &doc)?;
        print!("{md}");
        println!("results: {}", path.display());
        Ok(path)
    }
}

/// The repository (where bench/plot.py and docs/ are).
pub fn repo_root() -> PathBuf {
    // The binary runs from the repository (README commands); fall back to
    // the crate's location at build time.
    let cwd = std::env::current_dir().unwrap_or_default();
    if cwd.join("bench/plot.py").exists() {
        return cwd;
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The command line, for the results' JSON.
pub fn command_line() -> String {
    std::env::args().collect::<Vec<_>>().join(" ")
}
