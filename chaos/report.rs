//! The one-line summary, the report file and the RELIABILITY.md section.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};

use crate::check::Outcome;
use crate::{Cli, Event};

pub struct Report<'a> {
    pub cli: &'a Cli,
    pub events: &'a [Event],
    pub exits: &'a [(usize, Option<i32>, String)],
    /// Instances that did not stop on SIGTERM at the end, with the file
    /// holding their stacks.
    pub hung: &'a [(usize, std::path::PathBuf)],
    pub outcome: &'a Outcome,
    /// How long the output took to reach the truth after the last input.
    pub converged: Option<Duration>,
    pub input_done: Duration,
    pub took: Duration,
    pub restarts: u32,
}

impl Report<'_> {
    fn exact(&self) -> bool {
        self.cli.guarantee == "exactly_once_v2"
    }

    fn count(&self, prefix: &str) -> usize {
        self.events
            .iter()
            .filter(|e| e.fault.starts_with(prefix))
            .count()
    }

    fn count_detail(&self, fault: &str, detail: &str) -> usize {
        self.events
            .iter()
            .filter(|e| e.fault.starts_with(fault) && e.detail.contains(detail))
            .count()
    }

    /// Exactly-once: no wrong key, no repeated or backward value, no
    /// instance exited by itself, converged. At-least-once: no key below
    /// the truth, no exit, converged.
    pub fn passed(&self) -> bool {
        let o = self.outcome;
        let output_ok = if self.exact() {
            o.wrong.is_empty() && o.repeated_or_backward.is_empty()
        } else {
            o.below == 0
        };
        output_ok && self.exits.is_empty() && self.converged.is_some()
    }

    pub fn summary(&self) -> String {
        let o = self.outcome;
        format!(
            "chaos: {} · seed {} · {} instances · {} sentences · {} instance SIGKILLs, {} broker kills \
             ({} input leaders, {} coordinators), {} broker pauses, {} zombies · {} keys: {} wrong, {} \
             below, over-count {}, {} repeated or backward · {} instance exits, {} stalls, {} hung at the end \
             · {} in {:.0} s",
            self.cli.guarantee,
            self.cli.seed,
            self.cli.instances,
            self.cli.records,
            self.count("instance SIGKILL"),
            self.count("broker kill"),
            self.count_detail("broker kill", "leader of"),
            self.count_detail("broker kill", "coordinator"),
            self.count("broker SIGSTOP"),
            self.count("instance SIGSTOP"),
            o.keys,
            o.wrong.len(),
            o.below,
            o.over_count,
            o.repeated_or_backward.len(),
            self.exits.len(),
            self.count("stall"),
            self.hung.len(),
            if self.passed() { "PASS" } else { "FAIL" },
            self.took.as_secs_f64()
        )
    }

    pub fn markdown(&self) -> String {
        let o = self.outcome;
        let mut w = String::new();
        let _ = writeln!(
            w,
            "### {} — {}",
            self.cli.guarantee,
            if self.passed() { "pass" } else { "FAIL" }
        );
        let _ = writeln!(w);
        let _ = writeln!(w, "`{}`", self.cli.command);
        let _ = writeln!(w);
        let _ = writeln!(w, "{}", self.summary());
        let _ = writeln!(w);
        let _ = writeln!(w, "| | |");
        let _ = writeln!(w, "| --- | --- |");
        let rows = [
            ("seed", self.cli.seed.to_string()),
            ("instances of word-count", self.cli.instances.to_string()),
            ("input sentences", self.cli.records.to_string()),
            ("input/output partitions", self.cli.partitions.to_string()),
            ("cluster", "3 brokers (`scripts/kafka cluster`), replication 3, min.insync.replicas 2, `replication_factor=3`".into()),
            ("instance SIGKILLs (then restart)", self.count("instance SIGKILL").to_string()),
            (
                "broker kill -9 (then restart)",
                format!(
                    "{} ({} input partition leaders, {} coordinators)",
                    self.count("broker kill"),
                    self.count_detail("broker kill", "leader of"),
                    self.count_detail("broker kill", "coordinator")
                ),
            ),
            ("broker SIGSTOP/SIGCONT", self.count("broker SIGSTOP").to_string()),
            (
                "zombie instances (SIGSTOP past the session timeout, SIGCONT)",
                format!(
                    "{} ({} logged their writes fenced on waking)",
                    self.count("instance SIGSTOP"),
                    self.count_detail("zombie woke", "fenced ")
                ),
            ),
            ("instance restarts", self.restarts.to_string()),
            ("all input written, faults done", format!("{:.0} s", self.input_done.as_secs_f64())),
            (
                "output reached the truth",
                self.converged.map_or("never (timed out)".into(), |d| format!("{:.1} s later", d.as_secs_f64())),
            ),
            ("committed output records", o.output_records.to_string()),
            ("keys", o.keys.to_string()),
            ("keys wrong (last value ≠ truth)", o.wrong.len().to_string()),
            ("keys below the truth", o.below.to_string()),
            ("words in the input (sum of the truth)", o.truth_total.to_string()),
            (
                "over-count (sum above the truth)",
                format!(
                    "{} over {} keys ({:.1} % of the input's words)",
                    o.over_count,
                    o.keys_over,
                    100.0 * o.over_count as f64 / o.truth_total.max(1) as f64
                ),
            ),
            ("repeated or backward committed values", o.repeated_or_backward.len().to_string()),
            ("instances that exited by themselves", self.exits.len().to_string()),
            (
                "stalls (output not at the truth in time; every instance restarted)",
                self.count("stall").to_string(),
            ),
            (
                "instances that did not stop within 60 s of SIGTERM at the end",
                self.hung.len().to_string(),
            ),
        ];
        for (k, v) in rows {
            let _ = writeln!(w, "| {k} | {v} |");
        }
        let _ = writeln!(w);
        for (word, got, truth) in o.wrong.iter().take(10) {
            let _ = writeln!(w, "- wrong: `{word}` = {got:?}, truth {truth}");
        }
        for (word, before, after) in o.repeated_or_backward.iter().take(10) {
            let _ = writeln!(w, "- `{word}`: {after} after {before}");
        }
        for (i, stacks) in self.hung {
            let _ = writeln!(
                w,
                "- instance {i} hung at the end; stacks: `{}`",
                stacks.display()
            );
        }
        for (i, code, tail) in self.exits {
            let _ = writeln!(w, "- instance {i} exited ({code:?}):\n\n```\n{tail}\n```");
        }
        let _ = writeln!(w, "<details><summary>Faults in order</summary>");
        let _ = writeln!(w);
        let _ = writeln!(w, "| at | fault | target | detail |");
        let _ = writeln!(w, "| ---: | --- | --- | --- |");
        for e in self.events {
            let _ = writeln!(
                w,
                "| {:.1} s | {} | {} | {} |",
                e.at.as_secs_f64(),
                e.fault,
                e.target,
                e.detail
            );
        }
        let _ = writeln!(w);
        let _ = writeln!(w, "</details>");
        w
    }
}

/// Replaces (or appends) the section of `guarantee` in `path`.
pub fn write_section(path: &Path, guarantee: &str, body: &str) -> Result<()> {
    let (begin, end) = (
        format!("<!-- chaos:{guarantee} -->"),
        format!("<!-- /chaos:{guarantee} -->"),
    );
    let section = format!("{begin}\n{body}{end}\n");
    let old = std::fs::read_to_string(path).unwrap_or_else(|_| HEADER.to_string());
    let new = match (old.find(&begin), old.find(&end)) {
        (Some(b), Some(e)) => format!(
            "{}{section}{}",
            &old[..b],
            old[e + end.len()..].trim_start_matches('\n')
        ),
        _ => format!("{}\n\n{section}", old.trim_end()),
    };
    std::fs::write(path, new).with_context(|| format!("writing {}", path.display()))
}

const HEADER: &str = "# Reliability

Written by `weir-chaos` (`scripts/chaos`): the shipped `word-count` runs
with three instances on a 3-broker cluster on this machine while faults
are injected; a `read_committed` reader then compares the output with the
truth computed from the input. Each section is one full run; `scripts/chaos
--full` regenerates both.
";
