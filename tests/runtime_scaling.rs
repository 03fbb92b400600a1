//! Scaling without stopping the world, on the real broker: word count under
//! exactly-once with input flowing at a fixed rate scales from 2 instances
//! to 3 and back to 2, once under each group protocol. A `read_committed`
//! watcher notes when each output partition's records arrive; the
//! instances' `/metrics` tell which instance runs each task. Over the
//! partitions whose task did not move, the longest time without output
//! across a rebalance under KIP-848's `consumer` protocol is at most
//! 3 × `commit_interval_ms` plus the poll interval. Two intervals are the
//! cadence (one commit may pass without output for a partition); the third
//! is the coupling of exactly-once: the count task reads the repartition
//! topic, which every instance's transactions write, and `read_committed`
//! reads it only up to the oldest open transaction, so a moved upstream
//! task's new owner, whose first transaction runs while it restores, can
//! hold back the unmoved ones for one more interval (measured on unmoved
//! partitions: 2.10 s and 2.57 s in two runs of six, 1.1–1.4 s in the
//! others). The same measure under `classic` (eager rebalances close every
//! task) is printed beside it.
//! Counts are exact.
//!
//! A gap is "across a rebalance" when it overlaps, give or take one commit
//! interval, a span in which some instance's log shows it `Rebalancing`.
//! Gaps elsewhere in the scaling window have nothing to do with the group
//! (a slow transaction on a two-core machine running three instances and
//! the broker): they are printed, as the longest gap overall, not bounded.
//!
//! Word count's second sub-topology (the counts) writes output partition p
//! from task `1_p`, so output partition p's gaps are task `1_p`'s.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

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

/// The longest time without output in `from..to`, over the gaps `counts`
/// accepts: between two arrivals the later of which falls in the window,
/// or from the last arrival to `to`.
fn longest_gap(
    times: &[Instant],
    from: Instant,
    to: Instant,
    counts: impl Fn(Instant, Instant) -> bool,
) -> Duration {
    let mut longest = Duration::ZERO;
    let mut consider = |start: Instant, end: Instant| {
        if counts(start, end) {
            longest = longest.max(end - start);
        }
    };
    let mut previous: Option<Instant> = None;
    for &t in times {
        if t > to {
            break;
        }
        if let Some(p) = previous
            && t >= from
        {
            consider(p.max(from), t);
        }
        previous = Some(t);
    }
    if let Some(p) = previous {
        consider(p.max(from), to);
    }
    longest
}

/// The UTC time a log line starts with (`2026-12-02T02:18:50.873199Z`).
fn log_time(line: &str) -> Option<SystemTime> {
    let stamp = line.get(..line.find('Z')?)?;
    let (date, time) = stamp.split_once('T')?;
    let mut ymd = date.split('-').map(|n| n.parse::<i64>().ok());
    let (y, m, d) = (ymd.next()??, ymd.next()??, ymd.next()??);
    let mut hms = time.split(':');
    let (h, min) = (
        hms.next()?.parse::<u64>().ok()?,
        hms.next()?.parse::<u64>().ok()?,
    );
    let secs: f64 = hms.next()?.parse().ok()?;
    // Days since 1970-01-01 of a proleptic Gregorian date (Hinnant's
    // days_from_civil).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = u64::try_from(era * 146_097 + doe - 719_468).ok()?;
    Some(
        UNIX_EPOCH
            + Duration::from_secs(days * 86_400 + h * 3600 + min * 60)
            + Duration::from_secs_f64(secs),
    )
}

/// The spans in which an instance was rebalancing, from its log: each
/// `application state … to=Rebalancing` until the next `to=Running` (or
/// the end of the log), as instants of this process's clock.
fn rebalance_spans(log: &str, clock: (Instant, SystemTime)) -> Vec<(Instant, Instant)> {
    let at = |t: SystemTime| match t.duration_since(clock.1) {
        Ok(after) => clock.0 + after,
        Err(e) => clock.0 - e.duration(),
    };
    let mut spans = Vec::new();
    let mut open: Option<Instant> = None;
    for line in log.lines().filter(|l| l.contains("application state")) {
        let Some(t) = log_time(line).map(at) else {
            continue;
        };
        if line.contains("to=Rebalancing") {
            open.get_or_insert(t);
        } else if line.contains("to=Running")
            && let Some(start) = open.take()
        {
            spans.push((start, t));
        }
    }
    if let Some(start) = open {
        spans.push((start, Instant::now()));
    }
    spans
}

/// What one scaling run measured.
struct Run {
    protocol: &'static str,
    /// Per output partition: the longest time without output across a
    /// rebalance while the group scaled, and whether its task stayed on
    /// one instance.
    gaps: BTreeMap<i32, (Duration, bool)>,
    /// The longest time without output of any partition anywhere in the
    /// scaling window, rebalance or not.
    longest_anywhere: Duration,
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
    let clock = (Instant::now(), SystemTime::now());
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
    let pad = Duration::from_millis(COMMIT_INTERVAL_MS);
    let spans: Vec<(Instant, Instant)> = [&a, &b, &c]
        .iter()
        .flat_map(|app| rebalance_spans(&app.log_text(), clock))
        .collect();
    assert!(
        !spans.is_empty(),
        "{protocol}: the instances logged their rebalances"
    );
    let across_rebalance = |start: Instant, end: Instant| {
        spans
            .iter()
            .any(|&(s, e)| end + pad >= s && start <= e + pad)
    };
    let mut gaps = BTreeMap::new();
    let mut baseline = Duration::ZERO;
    let mut longest_anywhere = Duration::ZERO;
    for p in 0..4 {
        let times = arrivals.get(&p).map(Vec::as_slice).unwrap_or_default();
        baseline = baseline.max(longest_gap(times, steady_from, scaling_from, |_, _| true));
        longest_anywhere =
            longest_anywhere.max(longest_gap(times, scaling_from, scaling_to, |_, _| true));
        gaps.insert(
            p,
            (
                longest_gap(times, scaling_from, scaling_to, across_rebalance),
                unmoved.contains(&p),
            ),
        );
    }
    println!(
        "{protocol}: {n} sentences; count tasks seen on: {:?}",
        owners.seen
    );
    let at = |t: Instant| {
        let secs = t.saturating_duration_since(scaling_from).as_secs_f64()
            - scaling_from.saturating_duration_since(t).as_secs_f64();
        format!("{secs:.2}")
    };
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
    let rebalancing: Vec<String> = spans
        .iter()
        .map(|&(s, e)| format!("{}..{}", at(s), at(e)))
        .collect();
    println!(
        "{protocol}: instances rebalancing at {rebalancing:?} (s after the third instance started)"
    );
    Run {
        protocol,
        gaps,
        longest_anywhere,
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
        "{:>8}: longest time without output across a rebalance per partition while scaling 2→3→2: p50 {:.2} s, max {:.2} s; \
         partitions that did not move: [{}]; anywhere while scaling: max {:.2} s; before scaling: max {:.2} s",
        run.protocol,
        percentile(&all, 0.5).as_secs_f64(),
        percentile(&all, 1.0).as_secs_f64(),
        unmoved.join(", "),
        run.longest_anywhere.as_secs_f64(),
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
    let bound = Duration::from_millis(3 * COMMIT_INTERVAL_MS + POLL_MS);
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
            "consumer protocol: partition {p} did not move but had no output for {gap:?} across a rebalance (bound {bound:?})"
        );
    }
}

/// An instance that joins a group with every partition taken gets none:
/// under KIP-848 librdkafka then calls no rebalance callback at all. The
/// instance is ready all the same (it stands by to take over), and takes
/// the partitions when their owner leaves. Three instances of a
/// one-partition application start one after another: which one owns the
/// partition depends on the member ids, and at least one of the later two
/// joins to find it taken unless each sorts before all earlier ones (1 in
/// 6). Under each protocol.
fn spare_instances(protocol: &'static str) {
    let app_id = common::unique_topic(&format!("spare-{protocol}"));
    let (input, output) = (format!("{app_id}-in"), format!("{app_id}-out"));
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(common::create_topics(&[(&input, 1), (&output, 1)]));
    let f = Fixture {
        topology: &word_count::WORD_COUNT,
        app_id,
        input,
        output,
        extra: vec![format!("group_protocol={protocol}")],
        dir: tempfile::tempdir().unwrap(),
    };
    let mut apps = Vec::new();
    for i in 0..3 {
        let mut app = f.start(i, GUARANTEE);
        wait_ready(&mut [&mut app], Duration::from_secs(60));
        apps.push(app);
    }
    let owners = |apps: &mut [WeirApp]| -> Vec<usize> {
        (0..apps.len())
            .filter(|&i| {
                apps[i].is_running()
                    && apps[i]
                        .http_addr()
                        .and_then(running_tasks)
                        .is_some_and(|tasks| !tasks.is_empty())
            })
            .collect()
    };
    f.produce(0, 200);
    let truth = word_count_truth(200);
    let mut refs: Vec<&mut WeirApp> = apps.iter_mut().collect();
    wait_for_output(&f.output, Duration::from_secs(120), &mut refs, |c| {
        *c == truth
    });
    let owner = owners(&mut apps);
    assert_eq!(
        owner.len(),
        1,
        "{protocol}: one instance runs the one partition's tasks"
    );
    let owner = owner[0];
    assert_eq!(apps[owner].stop(), Some(0), "{protocol}: the owner stops");
    f.produce(200, 200);
    let truth = word_count_truth(400);
    let mut refs: Vec<&mut WeirApp> = apps
        .iter_mut()
        .enumerate()
        .filter(|(i, _)| *i != owner)
        .map(|(_, a)| a)
        .collect();
    let counts = wait_for_output(&f.output, Duration::from_secs(120), &mut refs, |c| {
        *c == truth
    });
    assert_eq!(
        counts, truth,
        "{protocol}: a spare instance took over, exact"
    );
    let next = owners(&mut apps);
    assert!(
        next.len() == 1 && next[0] != owner,
        "{protocol}: one of the spare instances runs the tasks now (owners {next:?}, first {owner})"
    );
    for (i, app) in apps.iter_mut().enumerate() {
        if i != owner {
            assert_eq!(app.stop(), Some(0));
        }
    }
}

#[test]
fn an_instance_without_partitions_is_ready_and_takes_over() {
    let _serial = serial();
    spare_instances("consumer");
    spare_instances("classic");
}

#[test]
fn log_times_read_as_utc() {
    let t = log_time("2026-12-02T02:18:50.250000Z  INFO weir: x").unwrap();
    assert_eq!(
        t.duration_since(UNIX_EPOCH).unwrap(),
        Duration::from_millis(1_796_177_930_250)
    );
    let leap = log_time("2000-02-29T23:59:59.000000Z  INFO").unwrap();
    assert_eq!(
        leap.duration_since(UNIX_EPOCH).unwrap().as_secs(),
        951_868_799
    );
    assert_eq!(log_time("no time here"), None);
}
