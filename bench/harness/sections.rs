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
            // One blank line between the section and what follows it.
            let rest = old[e + end.len()..].trim_start_matches('\n');
            let gap = if rest.is_empty() { "\n" } else { "\n\n" };
            format!("{}{}{gap}{rest}", &old[..b], section.trim_end())
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

#[cfg(test)]
mod tests {
    use super::write;

    const A: (&str, &str) = ("<!-- a:begin -->", "<!-- a:end -->");
    const NEW: &str = "<!-- a:begin -->\nnew\n<!-- a:end -->\n";

    fn rewritten(old: &str) -> String {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("BENCHMARKS.md");
        std::fs::write(&path, old).unwrap();
        write(&path, A, NEW).unwrap();
        std::fs::read_to_string(&path).unwrap()
    }

    #[test]
    fn a_rewritten_section_keeps_one_blank_line_before_the_next() {
        assert_eq!(
            rewritten("# R\n\n<!-- a:begin -->\nold\n<!-- a:end -->\n\n<!-- b:begin -->\n"),
            "# R\n\n<!-- a:begin -->\nnew\n<!-- a:end -->\n\n<!-- b:begin -->\n"
        );
        assert_eq!(
            rewritten("# R\n\n<!-- a:begin -->\nold\n<!-- a:end -->\n"),
            "# R\n\n<!-- a:begin -->\nnew\n<!-- a:end -->\n",
            "the last section ends the file with one newline"
        );
        assert_eq!(
            rewritten("# R\n"),
            "# R\n\n<!-- a:begin -->\nnew\n<!-- a:end -->\n",
            "a missing section is appended"
        );
    }
}
