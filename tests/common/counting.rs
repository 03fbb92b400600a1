//! Multi-process runs of a shipped counting topology (`word-count`,
//! `events-by-type`): an input and an output topic per test, `weir run`
//! instances with their own state directories, and reading the latest count
//! per key back with `read_committed`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use weir::topologies::{ShippedTopology, word_count};

use super::weir_app::WeirApp;

/// Multi-process tests of one test binary run one at a time, so on a small
/// CI machine their timings stay meaningful: hold this guard.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// The true word counts of the first `n` `word-count` sample sentences,
/// computed without Weir.
pub fn word_count_truth(n: u64) -> BTreeMap<String, i64> {
    let mut counts = BTreeMap::new();
    for i in 0..n {
        let (_, line) = word_count::sample(i);
        for word in String::from_utf8(line).unwrap().split_whitespace() {
            *counts.entry(word.to_lowercase()).or_insert(0) += 1;
        }
    }
    counts
}

/// The latest count per key in `topic` (read_committed; values are i64 big-endian).
pub fn output_counts(topic: &str) -> BTreeMap<String, i64> {
    super::latest_per_key(topic)
        .into_iter()
        .map(|(k, v)| {
            let v = v.expect("counts are never null");
            (
                String::from_utf8(k).unwrap(),
                i64::from_be_bytes(v.as_slice().try_into().expect("8-byte count")),
            )
        })
        .collect()
}

/// The last 30 lines of `text`.
pub fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// Waits until `done(latest counts)` holds, or panics (also when an
/// instance exits early).
pub fn wait_for_output(
    topic: &str,
    timeout: Duration,
    apps: &mut [&mut WeirApp],
    done: impl Fn(&BTreeMap<String, i64>) -> bool,
) -> BTreeMap<String, i64> {
    wait_until(
        timeout,
        Duration::from_secs(1),
        apps,
        || output_counts(topic),
        done,
    )
}

/// Reads with `read` every `interval` until `done` holds for what it read,
/// and returns that; panics after `timeout` (with the last reading) or when
/// one of `apps` exits.
pub fn wait_until<T: std::fmt::Debug>(
    timeout: Duration,
    interval: Duration,
    apps: &mut [&mut WeirApp],
    mut read: impl FnMut() -> T,
    done: impl Fn(&T) -> bool,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        let read = read();
        if done(&read) {
            return read;
        }
        for app in apps.iter_mut() {
            assert!(
                app.is_running(),
                "an instance exited early; log {}:\n{}",
                app.log.display(),
                tail(&app.log_text())
            );
        }
        assert!(
            Instant::now() < deadline,
            "not done within {timeout:?}; last: {read:?}"
        );
        std::thread::sleep(interval);
    }
}

/// One application of a shipped topology under test.
pub struct Fixture {
    /// The shipped topology.
    pub topology: &'static ShippedTopology,
    /// Its application id (unique per test).
    pub app_id: String,
    /// Its input topic (4 partitions).
    pub input: String,
    /// Its output topic (4 partitions).
    pub output: String,
    /// More `key=value` settings for every instance.
    pub extra: Vec<String>,
    /// Holds the instances' state directories and logs.
    pub dir: tempfile::TempDir,
}

impl Fixture {
    /// Creates the topics of a new application of `topology`.
    pub fn new(name: &str, topology: &'static ShippedTopology) -> Fixture {
        let app_id = super::unique_topic(name);
        let input = format!("{app_id}-in");
        let output = format!("{app_id}-out");
        let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
        rt.block_on(super::create_topics(&[(&input, 4), (&output, 4)]));
        Fixture {
            topology,
            app_id,
            input,
            output,
            extra: Vec::new(),
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// The settings of an instance under `guarantee`.
    pub fn settings(&self, guarantee: &str) -> Vec<String> {
        let mut settings = vec![
            format!("application_id={}", self.app_id),
            format!("processing_guarantee={guarantee}"),
            format!("topology.input_topic={}", self.input),
            format!("topology.output_topic={}", self.output),
        ];
        settings.extend(self.extra.iter().cloned());
        settings
    }

    /// Starts instance number `instance` (its own state dir and log).
    pub fn start(&self, instance: usize, guarantee: &str) -> WeirApp {
        let state = self.dir.path().join(format!("instance-{instance}"));
        let log = self.dir.path().join(format!("instance-{instance}.log"));
        WeirApp::start(self.topology.name, &state, &log, &self.settings(guarantee))
    }

    /// Writes sample records `start..start + count` of the topology.
    pub fn produce(&self, start: u64, count: u64) {
        super::produce_samples(&self.input, self.topology.sample, start, count);
    }
}

/// Prints the restore figures an instance logged; returns those lines.
pub fn restores(label: &str, app: &WeirApp) -> Vec<String> {
    let lines: Vec<String> = app
        .log_text()
        .lines()
        .filter(|l| l.contains("restored task"))
        .map(str::to_string)
        .collect();
    for line in &lines {
        println!(
            "{label}: {}",
            line.split("restored task").last().unwrap_or(line).trim()
        );
    }
    lines
}

/// Two instances; the second is SIGKILLed and restarted 5 times while `n`
/// records are written in 6 rounds. Returns the converged counts (equal to
/// `truth` under exactly-once, at least `truth` otherwise) and the restore
/// log lines.
pub fn crash_run(
    f: &Fixture,
    guarantee: &str,
    n: u64,
    truth: &BTreeMap<String, i64>,
) -> (BTreeMap<String, i64>, Vec<String>) {
    let mut stable = f.start(0, guarantee);
    let mut victim = f.start(1, guarantee);
    let per_round = n / 6;
    f.produce(0, per_round);
    for round in 1..=5 {
        std::thread::sleep(Duration::from_millis(2500));
        victim.kill();
        f.produce(round * per_round, per_round);
        victim = f.start(1, guarantee);
    }
    let rest = n - 6 * per_round;
    f.produce(6 * per_round, rest);
    let exact = guarantee == "exactly_once_v2";
    let counts = wait_for_output(
        &f.output,
        Duration::from_secs(300),
        &mut [&mut stable, &mut victim],
        |c| {
            if exact {
                c == truth
            } else {
                truth.iter().all(|(w, t)| c.get(w).is_some_and(|v| v >= t))
            }
        },
    );
    let mut lines = restores("stable", &stable);
    lines.extend(restores("restarted", &victim));
    assert_eq!(stable.stop(), Some(0));
    assert_eq!(victim.stop(), Some(0));
    (counts, lines)
}
