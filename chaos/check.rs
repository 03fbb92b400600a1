//! The checks: the truth computed from the input, and what a
//! `read_committed` reader of the output sees.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Result;

/// Word counts of word-count samples `0..records`, computed without Weir.
pub fn truth(records: u64) -> BTreeMap<String, i64> {
    let mut counts = BTreeMap::new();
    for i in 0..records {
        let (_, line) = weir::topologies::word_count::sample(i);
        for word in String::from_utf8_lossy(&line).split_whitespace() {
            *counts.entry(word.to_lowercase()).or_insert(0) += 1;
        }
    }
    counts
}

fn decode(value: Option<Vec<u8>>) -> i64 {
    value
        .and_then(|v| <[u8; 8]>::try_from(v.as_slice()).ok())
        .map_or(i64::MIN, i64::from_be_bytes)
}

/// The latest committed count per word.
fn latest(output: &str) -> BTreeMap<String, i64> {
    weir::testing::broker()
        .latest_per_key(output)
        .into_iter()
        .map(|(k, v)| (String::from_utf8_lossy(&k).into_owned(), decode(v)))
        .collect()
}

fn done(latest: &BTreeMap<String, i64>, truth: &BTreeMap<String, i64>, exact: bool) -> bool {
    if exact {
        latest == truth
    } else {
        truth
            .iter()
            .all(|(w, t)| latest.get(w).is_some_and(|v| v >= t))
    }
}

/// Waits until the committed output reaches the truth (exactly-once:
/// equals it; at-least-once: every word at least its true count), calling
/// `between` between reads; the time it took, or `None` after `timeout`.
pub fn wait_converged(
    output: &str,
    truth: &BTreeMap<String, i64>,
    exact: bool,
    timeout: Duration,
    mut between: impl FnMut() -> Result<()>,
) -> Result<Option<Duration>> {
    let started = Instant::now();
    loop {
        if done(&latest(output), truth, exact) {
            return Ok(Some(started.elapsed()));
        }
        if started.elapsed() > timeout {
            return Ok(None);
        }
        between()?;
        std::thread::sleep(Duration::from_secs(2));
    }
}

/// What the checks found.
#[derive(Default)]
pub struct Outcome {
    pub keys: usize,
    /// Sum of the true counts (words in the input).
    pub truth_total: i64,
    pub output_records: usize,
    /// Keys whose last committed value is not the truth (missing ones too).
    pub wrong: Vec<(String, Option<i64>, i64)>,
    /// Keys whose last value is below the truth.
    pub below: usize,
    /// Sum over keys of (last value - truth) where above.
    pub over_count: i64,
    pub keys_over: usize,
    /// A committed value equal to or below the previous one for its key.
    pub repeated_or_backward: Vec<(String, i64, i64)>,
}

/// Reads the whole output (`read_committed`) and compares it with `truth`.
pub fn check(output: &str, truth: &BTreeMap<String, i64>) -> Outcome {
    let mut outcome = Outcome::default();
    let mut last: BTreeMap<String, i64> = BTreeMap::new();
    for r in weir::testing::broker().read_committed(output) {
        let key = String::from_utf8_lossy(r.key.as_deref().unwrap_or_default()).into_owned();
        let value = decode(r.value);
        if let Some(&before) = last.get(&key)
            && value <= before
        {
            outcome
                .repeated_or_backward
                .push((key.clone(), before, value));
        }
        last.insert(key, value);
        outcome.output_records += 1;
    }
    outcome.keys = truth.len();
    outcome.truth_total = truth.values().sum();
    for (word, &t) in truth {
        let got = last.get(word).copied();
        if got != Some(t) {
            outcome.wrong.push((word.clone(), got, t));
        }
        match got {
            Some(v) if v > t => {
                outcome.over_count += v - t;
                outcome.keys_over += 1;
            }
            Some(v) if v == t => {}
            _ => outcome.below += 1,
        }
    }
    for (word, &v) in &last {
        if !truth.contains_key(word) {
            outcome.wrong.push((word.clone(), Some(v), 0));
        }
    }
    outcome
}
