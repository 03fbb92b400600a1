//! Scaling without stopping the world, on the real broker: word count under
//! exactly-once with input flowing at a fixed rate scales from 2 instances
//! to 3 and back to 2, once under each group protocol. A `read_committed`
//! watcher notes when each output partition's records arrive; the
//! instances' `/metrics` tell which instance runs each task. Over the
//! partitions whose task did not move, the longest time without output
//! under KIP-848's `consumer` protocol is at most 2 × `commit_interval_ms`
//! plus the poll interval; the same measure under `classic` (eager
//! rebalances close every task) is printed beside it. Counts are exact.
//!
//! Word count's second sub-topology (the counts) writes output partition p
//! from task `1_p`, so output partition p's gaps are task `1_p`'s.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::counting::{Fixture, serial, tail, wait_for_output, word_count_truth};
use common::weir_app::{WeirApp, http_get_at};
use weir::topologies::word_count;

const GUARANTEE: &str = "exactly_once_v2";
const COMMIT_INTERVAL_MS: u64 = 1000;
const POLL_MS: u64 = 100;
/// Sentences written every [`TICK`].
const PER_TICK: u64 = 40;
const TICK: Duration = Duration::from_millis(200);

/// `GET /metrics` of the server at `addr`.
fn metrics_text(addr: SocketAddr) -> Option<String> {
    http_get_at(addr, "/metrics").map(|(_, body)| body)
}

/// The tasks an instance runs now: those with a processed-records series.
fn running_tasks(addr: SocketAddr) -> Option<BTreeSet<String>> {
    let text = metrics_text(addr)?;
    Some(
        text.lines()
            .filter(|l| l.starts_with("weir_task_processed_records_total{"))
            .filter_map(|l| {
                let rest = l.split("task=\"").nth(1)?;
                Some(rest.split('"').next()?.to_string())
            })
            .collect(),
    )
}

/// Which instances ran each task, sampled while the scaling happens.
#[derive(Default)]
struct Owners {
    /// task → instances seen running it (in the window).
    seen: BTreeMap<String, BTreeSet<usize>>,
}

impl Owners {
    fn sample(&mut self, instances: &[(usize, SocketAddr)]) {
        for &(instance, addr) in instances {
            for task in running_tasks(addr).unwrap_or_default() {
                self.seen.entry(task).or_default().insert(instance);
            }
        }
    }

    /// Output partitions whose count task ran on one instance throughout.
    fn unmoved(&self) -> BTreeSet<i32> {
        (0..4)
            .filter(|p| {
                self.seen
                    .get(&format!("1_{p}"))
                    .is_some_and(|owners| owners.len() == 1)
            })
            .collect()
    }
}

/// Writes [`PER_TICK`] sample sentences every [`TICK`] through one
/// producer (a steady input: each output partition gets records in every
/// commit interval) until `producing` is cleared; counts them in `written`.
fn produce_steadily(input: &str, producing: &AtomicBool, written: &AtomicU64) {
    use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
    let producer: ThreadedProducer<DefaultProducerContext> = common::base_config()
        .set("enable.idempotence", "true")
        .set("partitioner", "murmur2_random")
        .set("linger.ms", "5")
        .create()
        .unwrap();
    let mut next = 0u64;
    while producing.load(Ordering::SeqCst) {
        let tick = Instant::now();
        for i in next..next + PER_TICK {
            let (key, value) = word_count::sample(i);
            let mut record = BaseRecord::<[u8], [u8]>::to(input).payload(&value);
            if let Some(key) = key.as_deref() {
                record = record.key(key);
            }
            producer.send(record).map_err(|(e, _)| e).unwrap();
        }
        next += PER_TICK;
        std::thread::sleep(TICK.saturating_sub(tick.elapsed()));
    }
    producer.flush(Duration::from_secs(30)).unwrap();
    written.store(next, Ordering::SeqCst);
}

/// Arrival times of committed output records, per partition.
type Arrivals = Arc<Mutex<BTreeMap<i32, Vec<Instant>>>>;

fn watch(topic: String, arrivals: Arrivals, watching: Arc<AtomicBool>) {
    use rdkafka::Message;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let consumer: BaseConsumer = common::base_config()
        .set("group.id", common::unique_topic("gap-watcher"))
        .set("isolation.level", "read_committed")
        .set("auto.offset.reset", "earliest")
        .set("fetch.wait.max.ms", "20")
        .create()
        .unwrap();
    consumer.subscribe(&[topic.as_str()]).unwrap();
    while watching.load(Ordering::SeqCst) {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(20)) {
            let now = Instant::now();
            arrivals
                .lock()
                .unwrap()
                .entry(m.partition())
                .or_default()
                .push(now);
        }
    }
}

/// The longest time without output of `partition` in `from..to`: between
/// two arrivals the later of which falls in the window, or from the last
/// arrival to `to`.
fn longest_gap(times: &[Instant], from: Instant, to: Instant) -> Duration {
    let mut longest = Duration::ZERO;
    let mut previous: Option<Instant> = None;
    for &t in times {
        if t > to {
            break;
        }
        if let Some(p) = previous
            && t >= from
        {
            longest = longest.max(t - p.max(from));
        }
        previous = Some(t);
    }
    if let Some(p) = previous {
        longest = longest.max(to - p.max(from));
    }
    longest
}

/// What one scaling run measured.
struct Run {
    protocol: &'static str,
    /// Per output partition: the longest time without output while the
    /// group scaled, and whether its task stayed on one instance.
    gaps: BTreeMap<i32, (Duration, bool)>,
    /// The longest time without output of any partition before scaling.
    baseline: Duration,
}

fn wait_ready(apps: &mut [&mut WeirApp], timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        for app in apps.iter_mut() {
            assert!(
                app.is_running(),
                "an instance exited; log:\n{}",
                tail(&app.log_text())
            );
        }
        if apps.iter().all(|a| a.is_ready()) {
            return;
        }
        assert!(Instant::now() < deadline, "instances not ready in time");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn scale_out_and_back(protocol: &'static str) -> Run {
    let mut f = Fixture::new(&format!("scale-{protocol}"), &word_count::WORD_COUNT);
    f.extra.push(format!("group_protocol={protocol}"));
    f.extra
        .push(format!("commit_interval_ms={COMMIT_INTERVAL_MS}"));
    f.extra.push(format!("poll_ms={POLL_MS}"));
    let f = Arc::new(f);
    let mut a = f.start(0, GUARANTEE);
    let mut b = f.start(1, GUARANTEE);
    wait_ready(&mut [&mut a, &mut b], Duration::from_secs(120));

    // Input at a fixed rate until told to stop.
    let producing = Arc::new(AtomicBool::new(true));
    let written = Arc::new(AtomicU64::new(0));
    let producer = {
        let (input, producing, written) = (f.input.clone(), producing.clone(), written.clone());
        std::thread::spawn(move || produce_steadily(&input, &producing, &written))
    };
    let arrivals: Arrivals = Arc::default();
    let watching = Arc::new(AtomicBool::new(true));
    let watcher = {
        let (topic, arrivals, watching) = (f.output.clone(), arrivals.clone(), watching.clone());
        std::thread::spawn(move || watch(topic, arrivals, watching))
    };
    let addr = |app: &WeirApp| app.http_addr().expect("the instance logged its address");
    let (addr_a, addr_b) = (addr(&a), addr(&b));
    let mut owners = Owners::default();
    let observe = |owners: &mut Owners, instances: &[(usize, SocketAddr)], secs: u64| {
        let until = Instant::now() + Duration::from_secs(secs);
        while Instant::now() < until {
            owners.sample(instances);
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    // Steady state first: output flows on every partition.
    std::thread::sleep(Duration::from_secs(6));
    let steady_from = Instant::now();
    std::thread::sleep(Duration::from_secs(4));
    let scaling_from = Instant::now();
    owners.sample(&[(0, addr_a), (1, addr_b)]);

    // 2 → 3.
    let mut c = f.start(2, GUARANTEE);
    let deadline = Instant::now() + Duration::from_secs(60);
    let addr_c = loop {
        if let Some(addr) = c.http_addr() {
            break addr;
        }
        assert!(
            c.is_running() && Instant::now() < deadline,
            "{}",
            tail(&c.log_text())
        );
        owners.sample(&[(0, addr_a), (1, addr_b)]);
        std::thread::sleep(Duration::from_millis(100));
    };
    let three = [(0, addr_a), (1, addr_b), (2, addr_c)];
    observe(&mut owners, &three, 12);
    let tasks_on_c = running_tasks(addr_c).unwrap_or_default();
    assert!(
        !tasks_on_c.is_empty(),
        "the third instance took tasks; log:\n{}",
        tail(&c.log_text())
    );
    // 3 → 2.
    let stopping = std::thread::spawn(move || {
        let code = c.stop();
        (code, c)
    });
    observe(&mut owners, &three, 12);
    let scaling_to = Instant::now();
    let (code, c) = stopping.join().unwrap();
    assert_eq!(
        code,
        Some(0),
        "graceful scale-in; log:\n{}",
        tail(&c.log_text())
    );

    producing.store(false, Ordering::SeqCst);
    producer.join().unwrap();
    let n = written.load(Ordering::SeqCst);
    let truth = word_count_truth(n);
    let counts = wait_for_output(
        &f.output,
        Duration::from_secs(300),
        &mut [&mut a, &mut b],
        |c| *c == truth,
    );
    assert_eq!(
        counts, truth,
        "{protocol}: exact after scaling out and back"
    );
    // Weir's own measure of the same thing: per input partition, the time
    // between commits that carried its progress, on the survivors.
    for (name, addr) in [("a", addr_a), ("b", addr_b)] {
        let text = metrics_text(addr).expect("metrics served");
        let series = |suffix: &str| -> BTreeMap<String, f64> {
            let family = format!("weir_partition_output_gap_seconds_{suffix}{{");
            let topic = format!("topic=\"{}\"", f.input);
            text.lines()
                .filter(|l| l.starts_with(&family) && l.contains(&topic))
                .filter_map(|l| {
                    let partition = l.split("partition=\"").nth(1)?.split('"').next()?;
                    Some((partition.to_string(), l.rsplit_once(' ')?.1.parse().ok()?))
                })
                .collect()
        };
        let (sums, counts) = (series("sum"), series("count"));
        assert!(
            !counts.is_empty(),
            "{protocol} {name}: output gaps measured"
        );
        for (partition, count) in &counts {
            let mean = sums[partition] / count;
            println!(
                "{protocol} {name}: input partition {partition}: {count} commits measured, mean gap {mean:.2} s"
            );
            assert!(
                mean > 0.3 && mean < 3.0,
                "{protocol} {name}: partition {partition}: mean gap {mean} s over {count} commits (commit interval {COMMIT_INTERVAL_MS} ms)"
            );
        }
    }
    watching.store(false, Ordering::SeqCst);
    watcher.join().unwrap();
    assert_eq!(a.stop(), Some(0));
    assert_eq!(b.stop(), Some(0));
    for (name, app) in [("a", &a), ("b", &b), ("c", &c)] {
        for line in app.log_text().lines() {
            if line.contains("WARN") || line.contains("rebalance") {
                println!("{protocol} {name}: {line}");
            }
        }
    }

    let arrivals = arrivals.lock().unwrap();
    let unmoved = owners.unmoved();
    let mut gaps = BTreeMap::new();
    let mut baseline = Duration::ZERO;
    for p in 0..4 {
        let times = arrivals.get(&p).map(Vec::as_slice).unwrap_or_default();
        baseline = baseline.max(longest_gap(times, steady_from, scaling_from));
        gaps.insert(
            p,
            (
                longest_gap(times, scaling_from, scaling_to),
                unmoved.contains(&p),
            ),
        );
    }
    println!(
        "{protocol}: {n} sentences; count tasks seen on: {:?}",
        owners.seen
    );
    let at = |t: Instant| format!("{:.2}", (t - scaling_from).as_secs_f64());
    for p in 0..4 {
        let times = arrivals.get(&p).map(Vec::as_slice).unwrap_or_default();
        let gaps: Vec<String> = times
            .windows(2)
            .filter(|w| {
                w[1] >= scaling_from
                    && w[1] <= scaling_to
                    && w[1] - w[0] > Duration::from_millis(1500)
            })
            .map(|w| format!("{}..{}", at(w[0]), at(w[1])))
            .collect();
        println!(
            "{protocol}: partition {p}: gaps over 1.5 s at {gaps:?} (s after the third instance started)"
        );
    }
    Run {
        protocol,
        gaps,
        baseline,
    }
}

fn percentile(sorted: &[Duration], q: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn report(run: &Run) {
    let mut all: Vec<Duration> = run.gaps.values().map(|(g, _)| *g).collect();
    all.sort();
    let unmoved: Vec<String> = run
        .gaps
        .iter()
        .filter(|(_, (_, kept))| *kept)
        .map(|(p, (g, _))| format!("p{p} {:.2} s", g.as_secs_f64()))
        .collect();
    println!(
        "{:>8}: longest time without output per partition while scaling 2→3→2: p50 {:.2} s, max {:.2} s; \
         partitions that did not move: [{}]; before scaling: max {:.2} s",
        run.protocol,
        percentile(&all, 0.5).as_secs_f64(),
        percentile(&all, 1.0).as_secs_f64(),
        unmoved.join(", "),
        run.baseline.as_secs_f64()
    );
}

#[test]
fn scaling_out_and_back_pauses_only_the_partitions_that_move() {
    let _serial = serial();
    let consumer = scale_out_and_back("consumer");
    let classic = scale_out_and_back("classic");
    report(&consumer);
    report(&classic);
    let bound = Duration::from_millis(2 * COMMIT_INTERVAL_MS + POLL_MS);
    let unmoved: Vec<(i32, Duration)> = consumer
        .gaps
        .iter()
        .filter(|(_, (_, kept))| *kept)
        .map(|(p, (g, _))| (*p, *g))
        .collect();
    assert!(
        !unmoved.is_empty(),
        "some count task stayed on its instance through 2→3→2"
    );
    for (p, gap) in unmoved {
        assert!(
            gap <= bound,
            "consumer protocol: partition {p} did not move but had no output for {gap:?} (bound {bound:?})"
        );
    }
}
