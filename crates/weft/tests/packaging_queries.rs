//! The monitoring files under `packaging/` against a running weft: every
//! PromQL expression of the Grafana dashboard
//! (`packaging/grafana/weft-dashboard.json`: panel targets, also those of
//! panels nested in collapsed rows, and the template variables' queries,
//! `label_values(selector, label)` read for its selector) and of the
//! Prometheus alert rules (`packaging/prometheus/weft-alerts.yml`) must
//! parse with an independent PromQL parser (`promql-parser`), and every
//! metric name it selects must be a family that a real weft (2 workers, a
//! MetricsPort, scraped with its bearer token) declares with a `# TYPE`
//! line — a histogram family `X` providing `X_bucket`, `X_sum` and
//! `X_count`. A renamed metric, or a query written against a family weft
//! does not export, fails here with the names and where they are used.
//! The test also checks the conventions the files promise: every panel
//! query uses the `${datasource}` variable, every alert rule has a
//! severity label and summary and description annotations.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use common::{free_port, metrics_token, scrape_metrics, WeftProcess};
use promql_parser::label::MatchOp;
use promql_parser::parser::{Expr, VectorSelector};

/// One PromQL expression found in a packaging file.
struct Query {
    /// Where it is, for the failure message (file, panel or rule).
    origin: String,
    /// The expression as written (Grafana variables not yet replaced).
    expr: String,
}

fn packaging_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../packaging")
}

/// Replace Grafana's variables so that the expression is plain PromQL:
/// the interval variables (`$__rate_interval`, `$__interval`, `$__range`,
/// used inside `[...]`) by a duration, any other `$var`, `${var}` or
/// `${var:format}` (the dashboard's own variables, used in label values)
/// by a word.
fn substitute_grafana_variables(expr: &str) -> String {
    let mut out = String::with_capacity(expr.len());
    let mut rest = expr;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let (name, len) = if let Some(braced) = after.strip_prefix('{') {
            match braced.find('}') {
                Some(end) => {
                    let inner = &braced[..end];
                    (inner.split(':').next().unwrap_or(inner), end + 2)
                }
                None => ("", 0),
            }
        } else {
            let end = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            (&after[..end], end)
        };
        if name.is_empty() {
            out.push('$');
            rest = after;
            continue;
        }
        out.push_str(match name {
            "__rate_interval" | "__interval" | "__range" => "5m",
            _ => "grafana_variable",
        });
        rest = &after[len..];
    }
    out.push_str(rest);
    out
}

/// A Grafana Prometheus variable query as PromQL: `label_values(selector,
/// label)` gives its selector, `label_values(label)` and `metrics(regex)`
/// name no metric (None), `query_result(expr)` gives its expression, and
/// anything else is taken as PromQL.
fn variable_query_promql(q: &str) -> Option<String> {
    let q = q.trim();
    if let Some(args) = q
        .strip_prefix("label_values(")
        .and_then(|a| a.strip_suffix(')'))
    {
        // The label is after the last comma outside braces and quotes.
        let (mut depth, mut quoted, mut split) = (0i32, false, None);
        for (i, c) in args.char_indices() {
            match c {
                '"' => quoted = !quoted,
                '{' | '(' if !quoted => depth += 1,
                '}' | ')' if !quoted => depth -= 1,
                ',' if !quoted && depth == 0 => split = Some(i),
                _ => {}
            }
        }
        return split.map(|i| args[..i].trim().to_string());
    }
    if q.starts_with("metrics(") || q.starts_with("label_names(") {
        return None;
    }
    if let Some(e) = q
        .strip_prefix("query_result(")
        .and_then(|a| a.strip_suffix(')'))
    {
        return Some(e.to_string());
    }
    Some(q.to_string())
}

/// Every `expr` of the dashboard's panels (recursively) and its template
/// variables' PromQL; `problems` gets panel queries that do not use the
/// `${datasource}` variable.
fn dashboard_queries(dash: &serde_json::Value, problems: &mut Vec<String>) -> Vec<Query> {
    fn walk_panels(panels: &[serde_json::Value], out: &mut Vec<Query>, problems: &mut Vec<String>) {
        for p in panels {
            let title = p["title"].as_str().unwrap_or("(untitled)");
            for t in p["targets"].as_array().into_iter().flatten() {
                let ds = t["datasource"]["uid"]
                    .as_str()
                    .or_else(|| p["datasource"]["uid"].as_str());
                if ds != Some("${datasource}") {
                    problems.push(format!(
                        "panel {title:?}: target datasource {ds:?}, not ${{datasource}}"
                    ));
                }
                if let Some(e) = t["expr"].as_str() {
                    out.push(Query {
                        origin: format!("dashboard panel {title:?}"),
                        expr: e.to_string(),
                    });
                }
            }
            // A collapsed row keeps its panels inside it.
            if let Some(nested) = p["panels"].as_array() {
                walk_panels(nested, out, problems);
            }
        }
    }
    let mut out = Vec::new();
    walk_panels(
        dash["panels"].as_array().map(Vec::as_slice).unwrap_or(&[]),
        &mut out,
        problems,
    );
    for v in dash["templating"]["list"].as_array().into_iter().flatten() {
        if v["type"].as_str() != Some("query") {
            continue; // datasource, custom, interval, ...: no PromQL
        }
        let name = v["name"].as_str().unwrap_or("?");
        // Newer Grafana stores {query, refId, qryType}, older a string.
        let q = v["query"]["query"]
            .as_str()
            .or_else(|| v["query"].as_str())
            .or_else(|| v["definition"].as_str());
        if let Some(e) = q.and_then(variable_query_promql) {
            out.push(Query {
                origin: format!("dashboard variable ${name}"),
                expr: e,
            });
        }
    }
    out
}

/// Every rule's `expr` in a Prometheus rules file; `problems` gets
/// alerting rules without a severity label or summary/description.
fn rule_queries(rules: &serde_yaml::Value, problems: &mut Vec<String>) -> Result<Vec<Query>> {
    let mut out = Vec::new();
    let groups = rules["groups"].as_sequence().context("no groups:")?;
    for g in groups {
        let group = g["name"].as_str().unwrap_or("?");
        for r in g["rules"].as_sequence().context("a group without rules:")? {
            let name = r["alert"]
                .as_str()
                .or_else(|| r["record"].as_str())
                .unwrap_or("?");
            let expr = match &r["expr"] {
                serde_yaml::Value::String(s) => s.clone(),
                serde_yaml::Value::Number(n) => n.to_string(),
                other => bail!("rule {group}/{name}: expr is {other:?}"),
            };
            if r["alert"].is_string() {
                if !r["labels"]["severity"].is_string() {
                    problems.push(format!("alert {name}: no severity label"));
                }
                for a in ["summary", "description"] {
                    if !r["annotations"][a].is_string() {
                        problems.push(format!("alert {name}: no {a} annotation"));
                    }
                }
            }
            out.push(Query {
                origin: format!("alert rule {group}/{name}"),
                expr,
            });
        }
    }
    Ok(out)
}

/// The metric name a selector selects: its name, or an `__name__="..."`
/// matcher.
fn selector_name(vs: &VectorSelector) -> Option<String> {
    vs.name.clone().or_else(|| {
        vs.matchers
            .matchers
            .iter()
            .find(|m| m.name == "__name__" && matches!(m.op, MatchOp::Equal))
            .map(|m| m.value.clone())
    })
}

/// The metric names of every vector and matrix selector in `e` (function
/// arguments, aggregation parameters and both sides of binary operators
/// included); `unnamed` counts selectors that name no single metric.
fn metric_names(e: &Expr, names: &mut BTreeSet<String>, unnamed: &mut usize) {
    let mut selector = |vs: &VectorSelector| match selector_name(vs) {
        Some(n) => {
            names.insert(n);
        }
        None => *unnamed += 1,
    };
    match e {
        Expr::VectorSelector(vs) => selector(vs),
        Expr::MatrixSelector(ms) => selector(&ms.vs),
        Expr::Aggregate(a) => {
            metric_names(&a.expr, names, unnamed);
            if let Some(p) = &a.param {
                metric_names(p, names, unnamed);
            }
        }
        Expr::Unary(u) => metric_names(&u.expr, names, unnamed),
        Expr::Binary(b) => {
            metric_names(&b.lhs, names, unnamed);
            metric_names(&b.rhs, names, unnamed);
        }
        Expr::Paren(p) => metric_names(&p.expr, names, unnamed),
        Expr::Subquery(s) => metric_names(&s.expr, names, unnamed),
        Expr::Call(c) => {
            for a in &c.args.args {
                metric_names(a, names, unnamed);
            }
        }
        Expr::Extension(x) => {
            for c in x.expr.children() {
                metric_names(c, names, unnamed);
            }
        }
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) => {}
    }
}

/// The families a MetricsPort body declares (`# TYPE name type`), with the
/// series names each provides: a histogram `X` gives `X_bucket`, `X_sum`,
/// `X_count`; a summary `X` gives `X`, `X_sum`, `X_count`.
fn provided_names(body: &str) -> (usize, BTreeSet<String>) {
    let mut families = 0;
    let mut names = BTreeSet::new();
    for l in body.lines() {
        let Some(rest) = l.strip_prefix("# TYPE ") else {
            continue;
        };
        let mut it = rest.split_whitespace();
        let (Some(name), kind) = (it.next(), it.next().unwrap_or("untyped")) else {
            continue;
        };
        families += 1;
        match kind {
            "histogram" => {
                for s in ["_bucket", "_sum", "_count"] {
                    names.insert(format!("{name}{s}"));
                }
            }
            "summary" => {
                names.insert(name.to_string());
                for s in ["_sum", "_count"] {
                    names.insert(format!("{name}{s}"));
                }
            }
            _ => {
                names.insert(name.to_string());
            }
        }
    }
    (families, names)
}

/// Series Prometheus makes itself for every target, which no exporter
/// declares: `up` (1 if the last scrape succeeded; the relay-down alert and
/// the dashboard's scrape panel use it) and the `scrape_*` series
/// (`scrape_duration_seconds`, `scrape_samples_scraped`, ...).
fn synthetic(name: &str) -> bool {
    name == "up" || name.starts_with("scrape_")
}

/// Scrape weft's MetricsPort (200, with the token), retrying while it is
/// not yet open; bounded.
fn scrape_ok(port: u16, token: &str) -> Result<String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match scrape_metrics(port, Some(token)) {
            Ok((200, body)) => return Ok(body),
            r if Instant::now() < deadline => {
                eprintln!("MetricsPort not ready ({r:?}); retrying");
                std::thread::sleep(Duration::from_millis(250));
            }
            Ok((status, _)) => bail!("MetricsPort answered {status}"),
            Err(e) => return Err(e).context("MetricsPort"),
        }
    }
}

#[test]
fn dashboard_and_alert_queries_name_exported_metrics() -> Result<()> {
    let dir = packaging_dir();
    let dash_path = dir.join("grafana/weft-dashboard.json");
    let rules_path = dir.join("prometheus/weft-alerts.yml");
    let dash: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(&dash_path).with_context(|| dash_path.display().to_string())?,
    )
    .context("dashboard JSON")?;
    let rules: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(&rules_path).with_context(|| rules_path.display().to_string())?,
    )
    .context("alert rules YAML")?;

    let mut problems = Vec::new();
    ensure!(
        dash["schemaVersion"].as_u64().is_some_and(|v| v >= 36),
        "dashboard schemaVersion {}",
        dash["schemaVersion"]
    );
    let dash_queries = dashboard_queries(&dash, &mut problems);
    let rule_queries = rule_queries(&rules, &mut problems)?;
    let (n_dash, n_rules) = (dash_queries.len(), rule_queries.len());
    ensure!(
        n_dash > 0 && n_rules > 0,
        "found {n_dash} dashboard and {n_rules} rule expressions"
    );

    // Parse everything; a metric name -> where it is used.
    let mut used: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut parse_errors = Vec::new();
    for q in dash_queries.iter().chain(&rule_queries) {
        let promql = substitute_grafana_variables(&q.expr);
        match promql_parser::parser::parse(&promql) {
            Ok(e) => {
                let (mut names, mut unnamed) = (BTreeSet::new(), 0);
                metric_names(&e, &mut names, &mut unnamed);
                if unnamed > 0 {
                    problems.push(format!(
                        "{}: a selector without a metric name in {}",
                        q.origin, q.expr
                    ));
                }
                if names.is_empty() {
                    problems.push(format!("{}: selects no metric: {}", q.origin, q.expr));
                }
                for n in names {
                    used.entry(n).or_default().insert(q.origin.clone());
                }
            }
            Err(err) => parse_errors.push(format!("{}: {err}\n    {promql}", q.origin)),
        }
    }

    // A real weft's families. Two scrapes a few seconds apart (the workers
    // report every second), their families united.
    let port = free_port();
    let weft = WeftProcess::start(2, &format!("MetricsPort 127.0.0.1:{port}\n"));
    let token = metrics_token(&weft.data_dir())?;
    let first = scrape_ok(port, &token)?;
    std::thread::sleep(Duration::from_secs(3));
    let second = scrape_ok(port, &token)?;
    let (families, mut provided) = provided_names(&first);
    let (families2, provided2) = provided_names(&second);
    provided.extend(provided2);
    ensure!(families > 0, "no # TYPE line in the scrape:\n{first}");

    let missing: Vec<String> = used
        .iter()
        .filter(|(n, _)| !provided.contains(*n) && !synthetic(n))
        .map(|(n, origins)| {
            let origins: Vec<&str> = origins.iter().map(String::as_str).collect();
            format!("{n} (used by {})", origins.join("; "))
        })
        .collect();

    println!(
        "packaging_queries: {} expressions parsed ({n_dash} from the dashboard, \
         {n_rules} from the alert rules), {} distinct metric names checked against \
         {} families in the scrape; {} parse errors, {} names missing, {} other problems",
        n_dash + n_rules,
        used.len(),
        families.max(families2),
        parse_errors.len(),
        missing.len(),
        problems.len()
    );
    let mut report = String::new();
    if !parse_errors.is_empty() {
        report += &format!(
            "expressions that do not parse:\n  {}\n",
            parse_errors.join("\n  ")
        );
    }
    if !missing.is_empty() {
        report += &format!(
            "metric names weft does not export ({}):\n  {}\n",
            missing.len(),
            missing.join("\n  ")
        );
    }
    if !problems.is_empty() {
        report += &format!("other problems:\n  {}\n", problems.join("\n  "));
    }
    ensure!(report.is_empty(), "{report}");
    Ok(())
}

/// The helpers on known input: Grafana variables replaced, a variable
/// query's selector found, metric names gathered from every part of an
/// expression, and a broken expression refused by the parser.
#[test]
fn query_helpers() {
    assert_eq!(
        substitute_grafana_variables(
            r#"rate(x{job="$job", instance=~"${instance:regex}"}[$__rate_interval])"#
        ),
        r#"rate(x{job="grafana_variable", instance=~"grafana_variable"}[5m])"#
    );
    assert_eq!(
        variable_query_promql(r#"label_values(weft_uptime_seconds{job="$job"}, instance)"#)
            .as_deref(),
        Some(r#"weft_uptime_seconds{job="$job"}"#)
    );
    assert_eq!(variable_query_promql("label_values(job)"), None);

    let e = promql_parser::parser::parse(
        r#"histogram_quantile(0.99, sum by (le) (rate(a_bucket[5m]))) / on() group_left topk(scalar(b), {__name__="c"}) and -d offset 1h"#,
    )
    .unwrap();
    let (mut names, mut unnamed) = (BTreeSet::new(), 0);
    metric_names(&e, &mut names, &mut unnamed);
    assert_eq!(
        names,
        BTreeSet::from(["a_bucket", "b", "c", "d"].map(String::from))
    );
    assert_eq!(unnamed, 0);
    assert!(promql_parser::parser::parse("rate(a[5m]").is_err());
}
