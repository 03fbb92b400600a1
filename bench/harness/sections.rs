//! Sections of BENCHMARKS.md that a `weir-bench` command other than
//! `report` measures: each between a begin and an end marker, rewritten in
//! place by its command and kept by `report` when it rewrites the file.

use std::path::Path;

use anyhow::{Context, Result};

/// The markers of the separately measured sections, in report order.
pub const KEPT: &[(&str, &str)] = &[
    (crate::dcmon::BEGIN, crate::dcmon::END),
    (crate::queries::BEGIN, crate::queries::END),
    (crate::restore::BEGIN, crate::restore::END),
    (crate::rebalance::BEGIN, crate::rebalance::END),
];

/// Replaces the section between `begin` and `end` in `path` (appends it
/// when absent); `section` includes both markers.
pub fn write(path: &Path, (begin, end): (&str, &str), section: &str) -> Result<()> {
    let old = std::fs::read_to_string(path).unwrap_or_default();
    let new = match (old.find(begin), old.find(end)) {
        (Some(b), Some(e)) => {
            let rest = old[e + end.len()..].trim_start_matches('\n');
            format!("{}{section}{rest}", &old[..b])
        }
        _ => format!("{}\n\n{section}", old.trim_end()),
    };
    std::fs::write(path, new).with_context(|| format!("writing {}", path.display()))
}

/// The section between `begin` and `end` of the report at `path`, to keep
/// across a rewrite.
pub fn kept(path: &Path, (begin, end): (&str, &str)) -> Option<String> {
    let old = std::fs::read_to_string(path).ok()?;
    let (b, e) = (old.find(begin)?, old.find(end)?);
    Some(old[b..e + end.len()].to_string() + "\n")
}
