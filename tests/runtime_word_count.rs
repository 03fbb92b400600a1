//! Word count on the real broker with several `weir run` processes: exact
//! under exactly-once with 3 instances, through scale-out and graceful
//! scale-in, and through repeated SIGKILLs; never below the truth under
//! at-least-once. Word count re-keys by word (`group_by`), so every record
//! also goes through the repartition topic.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::weir_app::WeirApp;
use weir::topologies::word_count;

/// These tests start several `weir` processes each; on a small CI machine
/// they run one at a time so their timings stay meaningful.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// The true counts of the first `n` sample sentences, computed without Weir.
fn true_counts(n: u64) -> BTreeMap<String, i64> {
    let mut counts = BTreeMap::new();
    for i in 0..n {
        let (_, line) = word_count::sample(i);
        for word in String::from_utf8(line).unwrap().split_whitespace() {
            *counts.entry(word.to_lowercase()).or_insert(0) += 1;
        }
    }
    counts
}

/// The latest count per word in `topic` (read_committed).
fn output_counts(topic: &str) -> BTreeMap<String, i64> {
    weir::tools::latest_per_key(&common::bootstrap(), topic)
        .expect("reading the output topic")
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

/// Waits until the output reaches `expected` (or `accept` says it is final), or panics.
fn wait_for_output(
    topic: &str,
    timeout: Duration,
    apps: &mut [&mut WeirApp],
    done: impl Fn(&BTreeMap<String, i64>) -> bool,
) -> BTreeMap<String, i64> {
    let deadline = Instant::now() + timeout;
    loop {
        let counts = output_counts(topic);
        if done(&counts) {
            return counts;
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
            "output did not converge within {timeout:?}; last: {counts:?}"
        );
        std::thread::sleep(Duration::from_secs(1));
    }
}

fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

struct Fixture {
    app_id: String,
    input: String,
    output: String,
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new(name: &str) -> Fixture {
        let app_id = common::unique_topic(name);
        let input = format!("{app_id}-lines");
        let output = format!("{app_id}-counts-out");
        let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
        rt.block_on(common::create_topics(&[(&input, 4), (&output, 4)]));
        Fixture {
            app_id,
            input,
            output,
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn settings(&self, guarantee: &str) -> Vec<String> {
        vec![
            format!("application_id={}", self.app_id),
            format!("processing_guarantee={guarantee}"),
            format!("topology.input_topic={}", self.input),
            format!("topology.output_topic={}", self.output),
        ]
    }

    fn start(&self, instance: usize, guarantee: &str) -> WeirApp {
        let state = self.dir.path().join(format!("instance-{instance}"));
        let log = self.dir.path().join(format!("instance-{instance}.log"));
        WeirApp::start("word-count", &state, &log, &self.settings(guarantee))
    }

    fn produce(&self, start: u64, count: u64) {
        weir::tools::generate(
            &common::bootstrap(),
            &self.input,
            word_count::sample,
            start,
            count,
            0,
        )
        .expect("writing input");
    }
}

/// Prints the restore figures each instance logged.
fn print_restores(label: &str, app: &WeirApp) {
    for line in app
        .log_text()
        .lines()
        .filter(|l| l.contains("restored task"))
    {
        println!(
            "{label}: {}",
            line.split("restored task").last().unwrap_or(line).trim()
        );
    }
}

#[test]
fn three_instances_count_exactly_once() {
    let _serial = serial();
    let f = Fixture::new("wc-eos3");
    let n = 100_000;
    f.produce(0, n);
    let mut a = f.start(0, "exactly_once_v2");
    let mut b = f.start(1, "exactly_once_v2");
    let mut c = f.start(2, "exactly_once_v2");
    let truth = true_counts(n);
    let started = Instant::now();
    let mut apps = [&mut a, &mut b, &mut c];
    let counts = wait_for_output(&f.output, Duration::from_secs(300), &mut apps, |c| {
        *c == truth
    });
    for app in apps.iter_mut() {
        let log = tail(&app.log_text());
        assert_eq!(app.stop(), Some(0), "graceful stop exits 0; log:\n{log}");
    }
    println!(
        "3 instances, exactly_once_v2: {n} sentences counted exactly in {:?}",
        started.elapsed()
    );
    assert_eq!(counts, truth);
}

#[test]
fn scale_out_and_in_keeps_counts_exact() {
    let _serial = serial();
    let f = Arc::new(Fixture::new("wc-elastic"));
    let n = 60_000u64;
    let mut first = f.start(0, "exactly_once_v2");
    // Input flows for about 20 s while instances come and go.
    let producing = {
        let f = f.clone();
        std::thread::spawn(move || {
            for chunk in 0..20 {
                f.produce(chunk * (n / 20), n / 20);
                std::thread::sleep(Duration::from_millis(800));
            }
        })
    };
    // Watch output arrivals to measure pauses (time with no output).
    let watching = Arc::new(AtomicBool::new(true));
    let watcher = {
        let (topic, watching) = (f.output.clone(), watching.clone());
        std::thread::spawn(move || output_gaps(&topic, &watching))
    };
    std::thread::sleep(Duration::from_secs(5));
    let mut second = f.start(1, "exactly_once_v2");
    let mut third = f.start(2, "exactly_once_v2");
    std::thread::sleep(Duration::from_secs(8));
    assert_eq!(
        second.stop(),
        Some(0),
        "graceful scale-in exits 0; log:\n{}",
        tail(&second.log_text())
    );
    producing.join().unwrap();
    let truth = true_counts(n);
    let counts = wait_for_output(
        &f.output,
        Duration::from_secs(300),
        &mut [&mut first, &mut third],
        |c| *c == truth,
    );
    assert_eq!(first.stop(), Some(0));
    assert_eq!(third.stop(), Some(0));
    watching.store(false, Ordering::SeqCst);
    let gaps = watcher.join().unwrap();
    for (at, gap) in &gaps {
        println!(
            "output pause of {:.2} s at t={:.1} s (rebalance)",
            gap.as_secs_f64(),
            at.as_secs_f64()
        );
    }
    assert_eq!(counts, true_counts(n));
}

/// Reads `topic` as records arrive and returns pauses over 500 ms between
/// outputs, as (time since start, pause).
fn output_gaps(topic: &str, watching: &AtomicBool) -> Vec<(Duration, Duration)> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let consumer: BaseConsumer = common::base_config()
        .set("group.id", common::unique_topic("gap-watcher"))
        .set("isolation.level", "read_committed")
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap();
    consumer.subscribe(&[topic]).unwrap();
    let start = Instant::now();
    let mut last: Option<Instant> = None;
    let mut gaps = Vec::new();
    while watching.load(Ordering::SeqCst) {
        if let Some(Ok(_)) = consumer.poll(Duration::from_millis(50)) {
            let now = Instant::now();
            if let Some(prev) = last
                && now - prev > Duration::from_millis(500)
            {
                gaps.push((prev - start, now - prev));
            }
            last = Some(now);
        }
    }
    gaps
}

fn crash_run(f: &Fixture, guarantee: &str, n: u64) -> (BTreeMap<String, i64>, Vec<String>) {
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
    let truth = true_counts(n);
    let exact = guarantee == "exactly_once_v2";
    let counts = wait_for_output(
        &f.output,
        Duration::from_secs(300),
        &mut [&mut stable, &mut victim],
        |c| {
            if exact {
                *c == truth
            } else {
                truth.iter().all(|(w, t)| c.get(w).is_some_and(|v| v >= t))
            }
        },
    );
    let mut restores = Vec::new();
    for (label, app) in [("stable", &stable), ("restarted", &victim)] {
        print_restores(label, app);
        restores.extend(
            app.log_text()
                .lines()
                .filter(|l| l.contains("restored task"))
                .map(str::to_string),
        );
    }
    assert_eq!(stable.stop(), Some(0));
    assert_eq!(victim.stop(), Some(0));
    (counts, restores)
}

#[test]
fn five_sigkills_keep_counts_exact_under_exactly_once() {
    let _serial = serial();
    let f = Fixture::new("wc-crash-eos");
    let n = 60_000;
    let (counts, restores) = crash_run(&f, "exactly_once_v2", n);
    assert_eq!(counts, true_counts(n), "exactly-once survives 5 SIGKILLs");
    assert!(
        !restores.is_empty(),
        "restarted instances restored state from changelogs"
    );
}

#[test]
fn five_sigkills_never_lose_counts_under_at_least_once() {
    let _serial = serial();
    let f = Fixture::new("wc-crash-alos");
    let n = 60_000;
    let (counts, _) = crash_run(&f, "at_least_once", n);
    let truth = true_counts(n);
    let over: i64 = truth.iter().map(|(w, t)| counts[w] - t).sum();
    let total: i64 = truth.values().sum();
    println!(
        "at_least_once after 5 SIGKILLs: over-count {over} of {total} words ({:.2}%)",
        over as f64 * 100.0 / total as f64
    );
    for (w, t) in &truth {
        assert!(
            counts[w] >= *t,
            "at-least-once never loses: {w} counted {} < {t}",
            counts[w]
        );
    }
}
