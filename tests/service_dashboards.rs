//! Every PromQL query in `dashboards/*.json` names only metrics Weir
//! exports: the names come from the registry Weir builds
//! (`Metrics::exported_names`), not from a list kept by hand.

use std::collections::BTreeSet;
use std::path::Path;

use weir::metrics::Metrics;

/// PromQL words that look like identifiers but are not metric names.
const KEYWORDS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "and",
    "or",
    "unless",
    "offset",
    "inf",
    "nan",
];

/// PromQL aggregation operators (they may take `by`/`without` before their arguments).
const AGGREGATIONS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];

/// The metric names a PromQL expression selects: identifiers outside label
/// matchers, strings, range selectors and `by`/`without`/`on`/`ignoring`
/// lists, not followed by `(` (functions and aggregations).
fn metric_names(expr: &str) -> Vec<String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut names = Vec::new();
    let mut i = 0;
    let mut skip_group = false;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '"' | '\'' | '`' => {
                i += 1;
                while i < chars.len() && chars[i] != c {
                    if chars[i] == '\\' {
                        i += 1;
                    }
                    i += 1;
                }
                i += 1;
            }
            '{' | '[' => {
                let close = if c == '{' { '}' } else { ']' };
                let mut quote = None;
                while i < chars.len() && (quote.is_some() || chars[i] != close) {
                    match (quote, chars[i]) {
                        (Some(_), '\\') => i += 1,
                        (Some(q), ch) if ch == q => quote = None,
                        (None, '"' | '\'' | '`') => quote = Some(chars[i]),
                        _ => {}
                    }
                    i += 1;
                }
                i += 1;
            }
            '(' if skip_group => {
                while i < chars.len() && chars[i] != ')' {
                    i += 1;
                }
                skip_group = false;
                i += 1;
            }
            c if c.is_ascii_alphabetic() || c == '_' || c == ':' => {
                let start = i;
                while i < chars.len()
                    && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
                {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let mut j = i;
                while j < chars.len() && chars[j] == ' ' {
                    j += 1;
                }
                let rest: String = chars[j..].iter().collect();
                // A call, or an aggregation with its grouping first: `sum by (le) (…)`.
                let is_call = rest.starts_with('(')
                    || (AGGREGATIONS.contains(&word.as_str())
                        && (rest.starts_with("by") || rest.starts_with("without")));
                let lower = word.to_ascii_lowercase();
                if matches!(lower.as_str(), "by" | "without" | "on" | "ignoring") {
                    skip_group = true;
                } else if !is_call && !KEYWORDS.contains(&lower.as_str()) {
                    names.push(word);
                }
            }
            c if c.is_ascii_digit() || c == '.' => {
                // Numbers, including 1e3 and durations like 5m.
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                    i += 1;
                }
            }
            _ => i += 1,
        }
    }
    names
}

/// Every `"expr"` string anywhere in a JSON document.
fn exprs(value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                match (k.as_str(), v) {
                    ("expr", serde_json::Value::String(s)) => out.push(s.clone()),
                    _ => exprs(v, out),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| exprs(v, out)),
        _ => {}
    }
}

#[test]
fn the_extractor_finds_metrics_and_skips_functions_labels_and_groupings() {
    assert_eq!(
        metric_names(
            r#"histogram_quantile(0.99, sum by (le, instance) (rate(weir_a_bucket{x="y{z}"}[$__rate_interval]))) / on (instance) weir_b offset 5m"#
        ),
        vec!["weir_a_bucket", "weir_b"]
    );
    assert_eq!(metric_names("sum(rate(up[5m])) > bool 1e3"), vec!["up"]);
}

#[test]
fn every_dashboard_query_names_only_exported_metrics() {
    let exported: BTreeSet<String> = Metrics::new("check").exported_names().into_iter().collect();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("dashboards");
    let mut dashboards = 0;
    let mut queries = 0;
    let mut used = BTreeSet::new();
    for entry in std::fs::read_dir(&dir).expect("reading dashboards/") {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        dashboards += 1;
        let text = std::fs::read_to_string(&path).unwrap();
        let json: serde_json::Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
        let mut found = Vec::new();
        exprs(&json, &mut found);
        assert!(!found.is_empty(), "{} has no queries", path.display());
        for expr in found {
            queries += 1;
            let names = metric_names(&expr);
            assert!(!names.is_empty(), "{}: no metric in {expr}", path.display());
            for name in names {
                assert!(
                    exported.contains(&name),
                    "{}: query `{expr}` names `{name}`, which Weir does not export; exported: {exported:?}",
                    path.display()
                );
                used.insert(name);
            }
        }
    }
    assert!(dashboards > 0, "no dashboards in {}", dir.display());
    eprintln!(
        "{dashboards} dashboard(s), {queries} queries, {} of {} exported names used",
        used.len(),
        exported.len()
    );
}
