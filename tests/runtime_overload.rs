//! Overload on the real broker: the scaling signal
//! (`weir::metrics::scaling`) and load shedding
//! (`weir::processor::task::shed`).
//!
//! A topology whose one operator costs 1 ms per record (a sleep: an
//! expensive call, without taking a CPU that a two-core machine does not
//! have) gets input at a fixed rate about three times what one thread
//! processes.
//!
//! * Scaling signal: one instance falls behind and its `GET /scaling`
//!   recommends N instances; with N instances at the same rate the group's
//!   lag, measured by the test itself (high watermarks minus the group's
//!   committed offsets), stays flat.
//! * Shedding: without it the end-to-end latency (measured by the test's
//!   own `read_committed` reader: arrival minus record timestamp) grows
//!   through the run; with `shed_max_lag_ms` it stays bounded while the
//!   share shed is close to 1 − capacity ÷ rate; under exactly-once, with
//!   an instance SIGKILLed mid-run, every input record is in the output or
//!   in the shed topic, exactly once.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use weir::config::ProcessingGuarantee;
use weir::runtime::{AppState, KafkaStreams};
use weir::topology::{Consumed, Produced, StreamsBuilder};

const PARTITIONS: i32 = 4;
/// Input records per second: about 3× what one thread processes (the
/// shedding test measures the capacity; about 700 records/s here).
const RATE: u64 = 2_100;
const COST: Duration = Duration::from_millis(1);

fn instance(app_id: &str, input: &str, output: &str, dir: &std::path::Path) -> KafkaStreams {
    instance_with(app_id, input, output, dir, |_| {})
}

fn instance_with(
    app_id: &str,
    input: &str,
    output: &str,
    dir: &std::path::Path,
    more: impl FnOnce(&mut weir::config::StreamsConfig),
) -> KafkaStreams {
    let builder = StreamsBuilder::new();
    builder
        .stream::<String, String>(input, Consumed::new())
        .map_values(|v: String| {
            std::thread::sleep(COST);
            v
        })
        .to(output, Produced::new());
    let mut config = weir::config::StreamsConfig::new(app_id, common::bootstrap());
    config.state_dir = dir.to_path_buf();
    config.processing_guarantee = ProcessingGuarantee::AtLeastOnce;
    config.commit_interval_ms = Some(500);
    // Longer than the lag statistics interval (5 s), as the default (10 s).
    config.scaling_window_ms = 10_000;
    config.http_bind = Some("127.0.0.1:0".parse().unwrap());
    more(&mut config);
    let mut app = KafkaStreams::new(builder.build().unwrap(), config).unwrap();
    app.start().unwrap();
    app
}

/// The group's lag: high watermark minus committed offset, summed.
fn group_lag(app_id: &str, topic: &str) -> i64 {
    let consumer: BaseConsumer = common::base_config()
        .set("group.id", app_id)
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition(topic, p);
    }
    let committed = consumer
        .committed_offsets(tpl, Duration::from_secs(10))
        .expect("committed offsets");
    let mut lag = 0;
    for p in 0..PARTITIONS {
        let (low, high) = consumer
            .fetch_watermarks(topic, p, Duration::from_secs(10))
            .expect("watermarks");
        let at = match committed.find_partition(topic, p).map(|e| e.offset()) {
            Some(Offset::Offset(o)) => o,
            _ => low,
        };
        lag += high - at;
    }
    lag
}

fn scaling(app: &KafkaStreams) -> Option<serde_json::Value> {
    let (status, body) = common::weir_app::get_json(app.http_addr()?, "/scaling");
    (status == 200).then_some(body)
}

fn wait_running(apps: &[&KafkaStreams], timeout: Duration) {
    let until = Instant::now() + timeout;
    while apps.iter().any(|a| a.state() != AppState::Running) {
        assert!(Instant::now() < until, "instances not running");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn an_overloaded_instance_recommends_the_instances_that_keep_the_lag_flat() {
    let _serial = common::counting::serial();
    let app_id = common::unique_topic("scaling-signal");
    let (input, output) = (format!("{app_id}-in"), format!("{app_id}-out"));
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(common::create_topics(&[
            (&input, PARTITIONS),
            (&output, PARTITIONS),
        ]));
    let dir = tempfile::tempdir().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (input, stop) = (input.clone(), stop.clone());
        std::thread::spawn(move || common::produce_at_rate(&input, RATE, 1000, &stop))
    };

    // One instance: it falls behind.
    let mut first = instance(&app_id, &input, &output, &dir.path().join("0"));
    wait_running(&[&first], Duration::from_secs(60));
    std::thread::sleep(Duration::from_secs(6));
    let lag_before = group_lag(&app_id, &input);
    std::thread::sleep(Duration::from_secs(10));
    let lag_after = group_lag(&app_id, &input);
    println!("one instance: lag {lag_before} → {lag_after} in 10 s");
    assert!(
        lag_after > lag_before + RATE as i64 * 10 / 4,
        "one instance at {RATE}/s falls behind: lag {lag_before} → {lag_after}"
    );
    // The first window (start-up: no lag statistics yet) gives no answer.
    let until = Instant::now() + Duration::from_secs(40);
    let answer = loop {
        if let Some(answer) = scaling(&first) {
            break answer;
        }
        assert!(Instant::now() < until, "GET /scaling does not answer");
        std::thread::sleep(Duration::from_millis(500));
    };
    println!("GET /scaling: {answer:#}");
    let recommended = answer["recommended_instances"].as_u64().unwrap();
    let sub = &answer["subtopologies"][0];
    let input_rate = sub["input_rate"].as_f64().unwrap();
    let true_rate = sub["true_rate_per_thread"].as_f64().unwrap();
    assert!(
        (input_rate - RATE as f64).abs() < RATE as f64 * 0.3,
        "input rate {input_rate}/s measured, {RATE}/s written"
    );
    assert!(
        true_rate > 500.0 && true_rate < 1_000.0,
        "a 1 ms operator processes under 1,000 records per busy second: {true_rate}"
    );
    assert!(
        (2..=PARTITIONS as u64).contains(&recommended),
        "recommends more instances than one, at most the partitions: {recommended}"
    );
    let gauge: u64 = first
        .metrics()
        .encode_text()
        .lines()
        .find(|l| l.starts_with("weir_recommended_instances{"))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .expect("weir_recommended_instances is exported");
    assert!(
        (2..=PARTITIONS as u64).contains(&gauge),
        "the gauge says so too: {gauge}"
    );

    // As many instances as recommended, at the same rate: the lag is flat
    // (the backlog of the first phase drains, so it may only shrink).
    let mut more: Vec<KafkaStreams> = (1..recommended)
        .map(|i| instance(&app_id, &input, &output, &dir.path().join(i.to_string())))
        .collect();
    let mut all: Vec<&KafkaStreams> = vec![&first];
    all.extend(more.iter());
    wait_running(&all, Duration::from_secs(90));
    std::thread::sleep(Duration::from_secs(10));
    let start = group_lag(&app_id, &input);
    std::thread::sleep(Duration::from_secs(15));
    let end = group_lag(&app_id, &input);
    println!("{recommended} instances: lag {start} at start, {end} 15 s later");
    assert!(
        end <= start + RATE as i64,
        "{recommended} instances keep up: lag {start} → {end} in 15 s at {RATE}/s"
    );
    let answer = scaling(&first).expect("GET /scaling");
    println!(
        "GET /scaling after scaling out: recommended {} (threads needed {})",
        answer["recommended_instances"], answer["threads_needed"]
    );

    stop.store(true, Ordering::Relaxed);
    let written = writer.join().unwrap();
    println!("{written} records written at {RATE}/s");
    for app in more.iter_mut() {
        assert!(app.close(Duration::from_secs(60)));
    }
    assert!(first.close(Duration::from_secs(60)));
}

const CHILD_ENV: &str = "WEIR_OVERLOAD_CHILD";
/// The shedding bound of the shedding test, ms.
const BOUND_MS: u64 = 1_000;

/// Records arriving at a `read_committed` reader of `topic`: (arrival,
/// latency = arrival − record timestamp, value), in ms.
type Arrivals = Arc<std::sync::Mutex<Vec<(i64, i64, String)>>>;

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn watch(topic: String, arrivals: Arrivals, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        use rdkafka::Message;
        let consumer: BaseConsumer = common::base_config()
            .set("group.id", format!("{topic}-watcher"))
            .set("isolation.level", "read_committed")
            .set("enable.auto.commit", "false")
            .create()
            .expect("watcher");
        let mut tpl = TopicPartitionList::new();
        for p in 0..PARTITIONS {
            tpl.add_partition_offset(&topic, p, Offset::Beginning)
                .unwrap();
        }
        consumer.assign(&tpl).expect("assign");
        while !stop.load(Ordering::Relaxed) {
            if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
                let arrival = now_ms();
                let ts = m.timestamp().to_millis().unwrap_or(arrival);
                let value = String::from_utf8_lossy(m.payload().unwrap_or_default()).to_string();
                arrivals
                    .lock()
                    .unwrap()
                    .push((arrival, arrival - ts, value));
            }
        }
    })
}

fn percentile(mut v: Vec<i64>, q: f64) -> i64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    v[((v.len() - 1) as f64 * q).round() as usize]
}

/// Latencies of the records that arrived between `from` and `to` (ms).
fn latencies(arrivals: &Arrivals, from: i64, to: i64) -> Vec<i64> {
    arrivals
        .lock()
        .unwrap()
        .iter()
        .filter(|(a, _, _)| (from..to).contains(a))
        .map(|(_, l, _)| *l)
        .collect()
}

/// The instance of the shedding test, in a child process (so that it can
/// be SIGKILLed): exactly-once, shedding at [`BOUND_MS`] into the shed topic.
#[test]
fn overload_child_entry_point() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return; // not a child: the real tests are above and below
    };
    let [app_id, input, output, shed, dir]: [&str; 5] =
        spec.split('|').collect::<Vec<_>>().try_into().unwrap();
    let _app = instance_with(app_id, input, output, std::path::Path::new(dir), |c| {
        c.processing_guarantee = ProcessingGuarantee::ExactlyOnceV2;
        c.commit_interval_ms = None;
        c.shed_max_lag_ms = Some(BOUND_MS);
        c.shed_topic = Some(shed.to_string());
    });
    println!("child running");
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

fn start_child(spec: &str) -> std::process::Child {
    std::process::Command::new(std::env::current_exe().unwrap())
        .args(["overload_child_entry_point", "--exact", "--nocapture"])
        .env(CHILD_ENV, spec)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("starting the child instance")
}

#[test]
fn shedding_bounds_latency_drops_the_excess_and_stays_exactly_once_through_a_kill() {
    let _serial = common::counting::serial();
    let rt = tokio::runtime::Runtime::new().unwrap();

    // Without shedding: the latency grows through the run; the capacity is
    // what comes out per second at the end.
    let app_a = common::unique_topic("overload-noshed");
    let (in_a, out_a) = (format!("{app_a}-in"), format!("{app_a}-out"));
    rt.block_on(common::create_topics(&[
        (&in_a, PARTITIONS),
        (&out_a, PARTITIONS),
    ]));
    let dir = tempfile::tempdir().unwrap();
    let arrivals_a: Arrivals = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = watch(out_a.clone(), arrivals_a.clone(), stop.clone());
    let mut plain = instance_with(&app_a, &in_a, &out_a, &dir.path().join("a"), |c| {
        c.processing_guarantee = ProcessingGuarantee::ExactlyOnceV2;
        c.commit_interval_ms = None;
    });
    wait_running(&[&plain], Duration::from_secs(60));
    let writer = {
        let (input, stop) = (in_a.clone(), stop.clone());
        std::thread::spawn(move || common::produce_at_rate(&input, RATE, 1000, &stop))
    };
    let t0 = now_ms();
    std::thread::sleep(Duration::from_secs(20));
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    watcher.join().unwrap();
    assert!(plain.close(Duration::from_secs(60)));
    let early = percentile(latencies(&arrivals_a, t0 + 2_000, t0 + 5_000), 0.5);
    let late = percentile(latencies(&arrivals_a, t0 + 17_000, t0 + 20_000), 0.5);
    let capacity = latencies(&arrivals_a, t0 + 10_000, t0 + 20_000).len() as f64 / 10.0;
    println!(
        "no shedding: median latency {early} ms at 2–5 s, {late} ms at 17–20 s; capacity {capacity:.0} records/s at {RATE}/s"
    );
    assert!(
        late > early + 5_000 && late > 3 * BOUND_MS as i64,
        "without shedding the latency grows: {early} → {late} ms"
    );

    // With shedding at BOUND_MS, exactly-once, the instance SIGKILLed at 20 s.
    let app_b = common::unique_topic("overload-shed");
    let (in_b, out_b, shed_b) = (
        format!("{app_b}-in"),
        format!("{app_b}-out"),
        format!("{app_b}-shed"),
    );
    rt.block_on(common::create_topics(&[
        (&in_b, PARTITIONS),
        (&out_b, PARTITIONS),
        (&shed_b, 1),
    ]));
    let spec = format!(
        "{app_b}|{in_b}|{out_b}|{shed_b}|{}",
        dir.path().join("b").display()
    );
    let arrivals_b: Arrivals = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = watch(out_b.clone(), arrivals_b.clone(), stop.clone());
    let mut child = start_child(&spec);
    // Give the child time to start and join its group before input flows.
    std::thread::sleep(Duration::from_secs(8));
    let stop_writing = Arc::new(AtomicBool::new(false));
    let writer = {
        let (input, stop_writing) = (in_b.clone(), stop_writing.clone());
        std::thread::spawn(move || common::produce_at_rate(&input, RATE, 1000, &stop_writing))
    };
    let t0 = now_ms();
    std::thread::sleep(Duration::from_secs(20));
    child.kill().unwrap();
    child.wait().unwrap();
    let killed = now_ms();
    println!("child SIGKILLed at {} s", (killed - t0) / 1000);
    let mut child = start_child(&spec);
    std::thread::sleep(Duration::from_secs(15));
    stop_writing.store(true, Ordering::Relaxed);
    let written = writer.join().unwrap();
    // Wait until every record is in the output or shed.
    let until = Instant::now() + Duration::from_secs(180);
    let (out, shed) = loop {
        let out = common::read_to_end(&out_b);
        let shed = common::read_to_end(&shed_b);
        if (out.len() + shed.len()) as u64 >= written || Instant::now() > until {
            break (out, shed);
        }
        std::thread::sleep(Duration::from_secs(2));
    };
    stop.store(true, Ordering::Relaxed);
    watcher.join().unwrap();
    child.kill().unwrap();
    child.wait().unwrap();

    let values = |records: &[weir::testing::ReadRecord]| -> Vec<String> {
        records
            .iter()
            .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).to_string())
            .collect()
    };
    let (out, shed) = (values(&out), values(&shed));
    let out_set: std::collections::BTreeSet<&String> = out.iter().collect();
    let shed_set: std::collections::BTreeSet<&String> = shed.iter().collect();
    assert_eq!(out_set.len(), out.len(), "no output record twice");
    assert_eq!(shed_set.len(), shed.len(), "no shed record twice");
    assert_eq!(
        out_set.intersection(&shed_set).count(),
        0,
        "no record both processed and shed"
    );
    let all: std::collections::BTreeSet<String> = (0..written).map(|n| format!("v{n}")).collect();
    let union: std::collections::BTreeSet<String> =
        out_set.union(&shed_set).map(|s| s.to_string()).collect();
    assert_eq!(
        union.len(),
        all.len(),
        "every input record is processed or shed: {} of {written}",
        union.len()
    );
    assert!(union == all, "exactly the input records");

    let steady = latencies(&arrivals_b, t0 + 5_000, killed);
    let p99 = percentile(steady.clone(), 0.99);
    let p50 = percentile(steady, 0.5);
    let after = percentile(
        latencies(&arrivals_b, killed + 8_000, killed + 15_000),
        0.99,
    );
    // The share shed in the steady part (records written 5–18 s into the
    // run, all decided before the kill); the restart's backlog is mostly
    // shed, so the whole run's share is higher.
    let number = |v: &String| v.trim_start_matches('v').parse::<u64>().ok();
    let steady = 5 * RATE..18 * RATE;
    let shed_steady = shed
        .iter()
        .filter_map(number)
        .filter(|n| steady.contains(n))
        .count();
    let share = shed_steady as f64 / (steady.end - steady.start) as f64;
    let expected = 1.0 - capacity / RATE as f64;
    println!(
        "shedding at {BOUND_MS} ms: latency p50 {p50} ms, p99 {p99} ms (5 s to the kill), p99 {after} ms (8–15 s after the restart); shed {:.1} % of the records written 5–18 s in (1 − capacity/rate = {:.1} %); in all {} of {written} shed, {} processed",
        share * 100.0,
        expected * 100.0,
        shed.len(),
        out.len()
    );
    // The bound plus a commit interval (100 ms) and a processing round
    // (at most one more), with room for a commit's own time.
    assert!(
        p99 < BOUND_MS as i64 + 500,
        "p99 latency {p99} ms stays under the bound {BOUND_MS} ms plus about a commit interval"
    );
    assert!(
        (share - expected).abs() < 0.15,
        "shed share {share:.2} is close to 1 − capacity/rate {expected:.2}"
    );
}
