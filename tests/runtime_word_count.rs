//! Word count on the real broker with several `weir run` processes: exact
//! under exactly-once with 3 instances, through scale-out and graceful
//! scale-in, and through repeated SIGKILLs; never below the truth under
//! at-least-once. Word count re-keys by word (`group_by`), so every record
//! also goes through the repartition topic.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::counting::{
    Fixture, crash_run, serial, tail, wait_for_output, word_count_truth as true_counts,
};
use weir::topologies::word_count;

#[test]
fn three_instances_count_exactly_once() {
    let _serial = serial();
    let f = Fixture::new("wc-eos3", &word_count::WORD_COUNT);
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
    let f = Arc::new(Fixture::new("wc-elastic", &word_count::WORD_COUNT));
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
    // The first instance saw every rebalance: its first join (all tasks
    // new), two joins that took tasks away, and a leave that gave some back.
    let moved = |change| {
        first
            .metric_with("weir_rebalance_tasks_total", &[("change", change)])
            .expect("metrics served")
    };
    let (revoked, assigned, kept) = (moved("revoked"), moved("assigned"), moved("kept"));
    println!("first instance's tasks: revoked {revoked}, assigned {assigned}, kept {kept}");
    let tasks = 2.0 * 4.0; // two sub-topologies, four partitions
    assert!(
        assigned >= tasks,
        "its first join assigned all {tasks} tasks"
    );
    assert!(revoked > 0.0, "tasks moved to the joining instances");
    assert!(kept > 0.0, "some tasks stayed through the joins");
    let owned = assigned - revoked;
    assert!(
        owned >= 1.0 && owned < tasks,
        "it owns part of the tasks at the end: {owned}"
    );
    assert_eq!(first.stop(), Some(0));
    assert_eq!(third.stop(), Some(0));
    watching.store(false, Ordering::SeqCst);
    let gaps = watcher.join().unwrap();
    for (at, gap) in &gaps {
        println!(
            "no output for {:.2} s at t={:.1} s (input comes in bursts ~1.4 s apart; instances join at t=5 s, one leaves at t=13 s)",
            gap.as_secs_f64(),
            at.as_secs_f64()
        );
    }
    assert_eq!(counts, true_counts(n));
}

/// Reads `topic` as records arrive and returns pauses over 1 s between
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
                && now - prev > Duration::from_secs(1)
            {
                gaps.push((prev - start, now - prev));
            }
            last = Some(now);
        }
    }
    gaps
}

#[test]
fn five_sigkills_keep_counts_exact_under_exactly_once() {
    let _serial = serial();
    let f = Fixture::new("wc-crash-eos", &word_count::WORD_COUNT);
    let n = 60_000;
    let (counts, restores) = crash_run(&f, "exactly_once_v2", n, &true_counts(n));
    assert_eq!(counts, true_counts(n), "exactly-once survives 5 SIGKILLs");
    assert!(
        !restores.is_empty(),
        "restarted instances restored state from changelogs"
    );
}

#[test]
fn five_sigkills_never_lose_counts_under_at_least_once() {
    let _serial = serial();
    let f = Fixture::new("wc-crash-alos", &word_count::WORD_COUNT);
    let n = 60_000;
    let (counts, _) = crash_run(&f, "at_least_once", n, &true_counts(n));
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
