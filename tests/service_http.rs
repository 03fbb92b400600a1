//! The HTTP server of a running instance on the real broker: `/health/ready`
//! is false while a large store restores from its changelog and true after;
//! `/metrics` shows every metric family with plausible values after a run
//! with a burst of input, undecodable records and a late record.

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use weir::config::StreamsConfig;
use weir::runtime::{AppState, KafkaStreams};
use weir::topology::{Consumed, Grouped, Materialized, Produced, StreamsBuilder, Topology};
use weir::windows::TimeWindows;

/// Changelog records written before the instance starts, per partition.
const PREFILL_PER_PARTITION: usize = 150_000;
const PARTITIONS: i32 = 2;
const LINES: u64 = 2_000;
const BURST_LINES: u64 = 100_000;
const UNDECODABLE: usize = 10;

/// One GET over a fresh TCP connection: (status, body).
fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).expect("connecting to the HTTP server");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .expect("reading the response");
    let (head, body) = response
        .split_once("\r\n\r\n")
        .expect("a response head ends with an empty line");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status code");
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .and_then(|l| l.trim().parse().ok())
        .expect("a Content-Length header");
    assert_eq!(body.len(), length, "body length matches Content-Length");
    (status, body.to_string())
}

/// One sample: (family or series name, labels, value).
type Sample = (String, BTreeMap<String, String>, f64);

/// Parses the Prometheus text format (the subset Weir writes).
fn parse(text: &str) -> Vec<Sample> {
    let mut samples = Vec::new();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect("series value");
        let value: f64 = value.parse().expect("a float value");
        let (name, labels) = match series.split_once('{') {
            Some((name, rest)) => {
                let mut labels = BTreeMap::new();
                for pair in rest.trim_end_matches('}').split("\",") {
                    if let Some((k, v)) = pair.split_once("=\"") {
                        labels.insert(k.to_string(), v.trim_end_matches('"').to_string());
                    }
                }
                (name.to_string(), labels)
            }
            None => (series.to_string(), BTreeMap::new()),
        };
        samples.push((name, labels, value));
    }
    samples
}

/// Sum of the samples of `name` whose labels include `filter`.
fn sum(samples: &[Sample], name: &str, filter: &[(&str, &str)]) -> f64 {
    matching(samples, name, filter).map(|s| s.2).sum()
}

fn matching<'a>(
    samples: &'a [Sample],
    name: &'a str,
    filter: &'a [(&str, &str)],
) -> impl Iterator<Item = &'a Sample> {
    samples.iter().filter(move |(n, labels, _)| {
        n == name
            && filter
                .iter()
                .all(|(k, v)| labels.get(*k).map(String::as_str) == Some(*v))
    })
}

fn producer() -> ThreadedProducer<DefaultProducerContext> {
    common::base_config()
        .set("linger.ms", "20")
        .set("queue.buffering.max.messages", "1000000")
        .create()
        .expect("creating the producer")
}

/// Sends (partition, key, value, timestamp) records and waits for all acks.
fn produce(
    topic: &str,
    records: impl Iterator<Item = (Option<i32>, Vec<u8>, Vec<u8>, Option<i64>)>,
) {
    let producer = producer();
    for (partition, key, value, timestamp) in records {
        let mut record = BaseRecord::<[u8], [u8]>::to(topic)
            .key(&key)
            .payload(&value);
        record.partition = partition;
        record.timestamp = timestamp;
        let mut pending = record;
        loop {
            match producer.send(pending) {
                Ok(()) => break,
                Err((_, back)) => {
                    pending = back;
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
        }
    }
    producer.flush(Duration::from_secs(60)).expect("flushing");
}

fn lines(from: u64, to: u64) -> impl Iterator<Item = (Option<i32>, Vec<u8>, Vec<u8>, Option<i64>)> {
    (from..to).map(|i| {
        let (_, line) = weir::topologies::word_count::sample(i);
        (None, i.to_be_bytes().to_vec(), line, None)
    })
}

/// Word count (store `counts`) plus a windowed count (1 s windows, no grace)
/// that drops late records.
fn topology(input: &str, output: &str, events: &str, windowed_out: &str) -> Topology {
    let builder = StreamsBuilder::new();
    builder
        .stream::<Option<Vec<u8>>, String>(input, Consumed::new())
        .flat_map_values(|line: String| {
            line.split_whitespace()
                .map(str::to_lowercase)
                .collect::<Vec<_>>()
        })
        .group_by(|_, word: &String| word.clone(), Grouped::as_("counts"))
        .count(Materialized::as_("counts"))
        .to_stream()
        .to(output, Produced::new());
    builder
        .stream::<String, String>(events, Consumed::new())
        .group_by_key(Grouped::new())
        .windowed_by(
            TimeWindows::of_size_with_grace(Duration::from_secs(1), Duration::ZERO).unwrap(),
        )
        .count(Materialized::as_("per-second"))
        .to_stream()
        .to(windowed_out, Produced::new());
    builder.build().expect("a valid topology")
}

#[test]
fn ready_after_restore_and_every_metric_family_is_exported() {
    let app_id = common::unique_topic("svc-http");
    let input = common::unique_topic("svc-lines");
    let output = common::unique_topic("svc-counts");
    let events = common::unique_topic("svc-events");
    let windowed_out = common::unique_topic("svc-per-second");
    let changelog = format!("{app_id}-counts-changelog");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(common::create_topics(&[
        (&input, PARTITIONS),
        (&output, PARTITIONS),
        (&events, 1),
        (&windowed_out, 1),
        (&changelog, PARTITIONS),
    ]));

    // A large store: its changelog holds records of keys no input produces.
    let started = Instant::now();
    produce(
        &changelog,
        (0..PREFILL_PER_PARTITION * PARTITIONS as usize).map(|i| {
            let partition = (i % PARTITIONS as usize) as i32;
            (
                Some(partition),
                format!("prefill-{i:08}").into_bytes(),
                1i64.to_be_bytes().to_vec(),
                None,
            )
        }),
    );
    eprintln!("pre-filled {changelog} in {:?}", started.elapsed());
    produce(&input, lines(0, LINES));
    produce(
        &input,
        (0..UNDECODABLE).map(|i| (None, vec![i as u8], vec![0xff, 0xfe, 0xfd], None)),
    );

    let state_dir = tempfile::tempdir().unwrap();
    let config = StreamsConfig::from_pairs([
        ("application_id", app_id.as_str()),
        ("bootstrap_servers", common::bootstrap().as_str()),
        ("processing_guarantee", "exactly_once_v2"),
        ("state_dir", state_dir.path().to_str().unwrap()),
        ("http_bind", "127.0.0.1:0"),
        ("deserialization_handler", "log_and_continue"),
        ("consumer.statistics.interval.ms", "200"),
    ])
    .unwrap();
    let mut app =
        KafkaStreams::new(topology(&input, &output, &events, &windowed_out), config).unwrap();
    app.start().expect("starting the instance");
    let addr = app.http_addr().expect("http_bind is set");
    assert_eq!(get(addr, "/health/live").0, 200);
    let (status, topology_text) = get(addr, "/topology");
    assert_eq!(status, 200);
    assert!(topology_text.contains("counts"), "{topology_text}");
    let (status, mermaid) = get(addr, "/topology?format=mermaid");
    assert_eq!(status, 200);
    assert!(
        mermaid.starts_with("flowchart") || mermaid.contains("flowchart"),
        "{mermaid}"
    );
    assert_eq!(get(addr, "/nope").0, 404);

    // Not ready while restoring; ready after.
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut not_ready_while_restoring = 0;
    let mut max_remaining = 0.0f64;
    loop {
        let (status, body) = get(addr, "/health/ready");
        let samples = parse(&get(addr, "/metrics").1);
        let remaining = sum(&samples, "weir_restore_remaining_records", &[]);
        if status == 503 && remaining > 0.0 {
            assert!(body.contains("\"ready\":false"), "{body}");
            not_ready_while_restoring += 1;
            max_remaining = max_remaining.max(remaining);
        }
        if status == 200 {
            assert!(body.contains("\"ready\":true"), "{body}");
            assert_eq!(app.state(), AppState::Running);
            assert_eq!(remaining, 0.0, "ready with records left to restore");
            break;
        }
        assert!(Instant::now() < deadline, "not ready within 300 s: {body}");
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!(
        "ready after {:?}; {not_ready_while_restoring} scrapes saw 503 with up to {max_remaining} records left to restore",
        started.elapsed()
    );
    assert!(
        not_ready_while_restoring > 0,
        "never observed the restore in progress"
    );

    // A burst the instance cannot absorb at once (lag), and a late record.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    produce(
        &events,
        [
            (None, b"k".to_vec(), b"on time".to_vec(), Some(now)),
            (None, b"k".to_vec(), b"late".to_vec(), Some(now - 60_000)),
        ]
        .into_iter(),
    );
    let burst = std::thread::spawn({
        let input = input.clone();
        move || produce(&input, lines(LINES, LINES + BURST_LINES))
    });
    let total_lines = (LINES + BURST_LINES) as f64;
    let words = total_lines * 5.0;
    let mut max_lag = 0.0f64;
    let mut max_busy = 0.0f64;
    let deadline = Instant::now() + Duration::from_secs(300);
    let samples = loop {
        let samples = parse(&get(addr, "/metrics").1);
        max_lag = max_lag.max(sum(&samples, "weir_consumer_lag_records", &[]));
        for (_, _, ratio) in matching(&samples, "weir_task_busy_ratio", &[]) {
            max_busy = max_busy.max(*ratio);
        }
        let done = sum(&samples, "weir_thread_processed_records_total", &[]);
        let late = sum(
            &samples,
            "weir_task_dropped_records_total",
            &[("reason", "late")],
        );
        if done >= total_lines + words + 1.0 && late >= 1.0 && burst.is_finished() {
            // One more statistics interval so the lag reflects the end.
            std::thread::sleep(Duration::from_millis(600));
            break parse(&get(addr, "/metrics").1);
        }
        assert_ne!(app.state(), AppState::Error, "{:?}", app.error());
        assert!(
            Instant::now() < deadline,
            "input not processed within 300 s: {done} of {} records",
            total_lines + words + 1.0
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    burst.join().unwrap();
    eprintln!("max consumer lag seen: {max_lag}");

    let v = |name: &str, filter: &[(&str, &str)]| sum(&samples, name, filter);
    let mut report = Vec::new();
    for (name, value) in [
        ("weir_thread_polls_total", v("weir_thread_polls_total", &[])),
        (
            "weir_thread_poll_duration_seconds_count",
            v("weir_thread_poll_duration_seconds_count", &[]),
        ),
        (
            "weir_thread_process_duration_seconds_count",
            v("weir_thread_process_duration_seconds_count", &[]),
        ),
        (
            "weir_thread_processed_records_total",
            v("weir_thread_processed_records_total", &[]),
        ),
        (
            "weir_thread_commit_duration_seconds_count",
            v("weir_thread_commit_duration_seconds_count", &[]),
        ),
        (
            "weir_thread_commit_duration_seconds_sum",
            v("weir_thread_commit_duration_seconds_sum", &[]),
        ),
        (
            "weir_transactions_total committed",
            v("weir_transactions_total", &[("result", "committed")]),
        ),
        ("weir_rebalances_total", v("weir_rebalances_total", &[])),
        (
            "weir_rebalance_duration_seconds_sum",
            v("weir_rebalance_duration_seconds_sum", &[]),
        ),
        (
            "weir_task_processed_records_total",
            v("weir_task_processed_records_total", &[]),
        ),
        (
            "weir_task_e2e_latency_seconds_count",
            v("weir_task_e2e_latency_seconds_count", &[]),
        ),
        (
            "weir_task_e2e_latency_seconds_sum",
            v("weir_task_e2e_latency_seconds_sum", &[]),
        ),
        ("max weir_task_busy_ratio", max_busy),
        (
            "weir_store_puts_total",
            v("weir_store_puts_total", &[("store", "counts")]),
        ),
        (
            "weir_store_gets_total",
            v("weir_store_gets_total", &[("store", "counts")]),
        ),
        (
            "weir_store_entries",
            v("weir_store_entries", &[("store", "counts")]),
        ),
        (
            "weir_restore_restored_records_total",
            v(
                "weir_restore_restored_records_total",
                &[("store", "counts")],
            ),
        ),
        (
            "weir_restore_rate_records_per_second",
            v(
                "weir_restore_rate_records_per_second",
                &[("store", "counts")],
            ),
        ),
        ("max weir_consumer_lag_records", max_lag),
    ] {
        eprintln!("{name} = {value}");
        report.push((name, value));
        assert!(value > 0.0, "{name} should be > 0, is {value}");
    }
    // Exact values where the truth is known.
    let prefilled = (PREFILL_PER_PARTITION * PARTITIONS as usize) as f64;
    assert_eq!(
        v(
            "weir_restore_restored_records_total",
            &[("store", "counts")]
        ),
        prefilled
    );
    assert_eq!(v("weir_restore_remaining_records", &[]), 0.0);
    assert_eq!(v("weir_restoring_tasks", &[]), 0.0);
    assert_eq!(
        v(
            "weir_task_dropped_records_total",
            &[("reason", "deserialization_error")]
        ),
        UNDECODABLE as f64
    );
    assert_eq!(
        v("weir_task_dropped_records_total", &[("reason", "late")]),
        1.0
    );
    // Every record that passed through a task: lines, the words they hold
    // (through the repartition topic), and the events (the late one may
    // count as processed: the window drops it, not the source).
    let processed = v("weir_task_processed_records_total", &[]);
    assert!(
        (total_lines + words + 1.0..=total_lines + words + 2.0).contains(&processed),
        "{processed}"
    );
    assert_eq!(v("weir_thread_processed_records_total", &[]), processed);
    // Every word updates its count, through the record cache (on by
    // default): the store is read when a word is not cached yet and written
    // once per word and commit, so both counts are at most one per word, and
    // the repeated words of a commit interval collapse (restoring wrote one
    // put per changelog record).
    let gets = v("weir_store_gets_total", &[("store", "counts")]);
    let puts = v("weir_store_puts_total", &[("store", "counts")]) - prefilled;
    assert!(gets > 0.0 && gets <= words, "gets {gets} of {words} words");
    assert!(puts > 0.0 && puts < words, "puts {puts} of {words} words");
    eprintln!("counts store: {gets} gets, {puts} puts for {words} words (record cache)");
    // One latency sample per record a task finished, skipped ones included.
    assert_eq!(
        v("weir_task_e2e_latency_seconds_count", &[]),
        processed + UNDECODABLE as f64
    );
    assert!(v("weir_store_entries", &[("store", "counts")]) >= prefilled);
    // The windowed count wrote its on-time record (window stores are metered too).
    assert!(v("weir_store_puts_total", &[("store", "per-second")]) >= 1.0);
    assert!(max_busy <= 1.0, "busy ratio {max_busy}");
    for partition in 0..PARTITIONS {
        let p = partition.to_string();
        assert_eq!(
            matching(
                &samples,
                "weir_consumer_lag_records",
                &[("topic", &input), ("partition", &p)]
            )
            .count(),
            1,
            "no lag series for {input}/{partition}"
        );
    }
    assert_eq!(
        matching(
            &samples,
            "weir_transactions_total",
            &[("result", "aborted")]
        )
        .count(),
        1
    );
    assert!(
        samples
            .iter()
            .all(|(_, labels, _)| labels.get("application_id") == Some(&app_id))
    );

    assert!(app.close(Duration::from_secs(60)));
    assert!(
        TcpStream::connect(addr).is_err(),
        "the server stops with the instance"
    );
}
