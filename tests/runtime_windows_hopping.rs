//! A hopping-window count over 1,000,000 records on the real broker with
//! `exactly_once_v2`: every window's last committed count equals a
//! reference computed here without Weir. (`WEIR_HOPPING_RECORDS` lowers the
//! record count for a quick local run.)

mod common;

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use weir::config::{ProcessingGuarantee, StreamsConfig};
use weir::runtime::{AppState, KafkaStreams};
use weir::serdes::{I64Serde, Serde, StringSerde};
use weir::time::ValueTimestamp;
use weir::topology::{Consumed, Grouped, Materialized, Produced, StreamsBuilder};
use weir::windows::{TimeWindows, WindowedSerde};

const SIZE_MS: i64 = 60_000;
const ADVANCE_MS: i64 = 30_000;
const GRACE_MS: i64 = 10_000;
const KEYS: u64 = 50;
/// Event time between consecutive records (ms).
const STEP_MS: i64 = 2;
/// The most a record is behind its position (ms); below the grace, so
/// no record is late and every record counts.
const JITTER_MS: u64 = 3_000;
const PARTITIONS: i32 = 4;

/// Event time of record 0: a whole minute, far enough before now that all
/// event times are in the past, near enough that the window changelogs
/// (retained by record time) keep them.
static BASE_MS: OnceLock<i64> = OnceLock::new();

fn records() -> u64 {
    std::env::var("WEIR_HOPPING_RECORDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000)
}

fn mix(i: u64, salt: u64) -> u64 {
    let mut x = (i ^ salt.rotate_left(17)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^= x >> 31;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^ (x >> 27)
}

/// Record `i`: key `kNN`, event time (the value, i64 big-endian).
fn record(i: u64) -> (String, i64) {
    let base = *BASE_MS.get().expect("base set");
    let ts = base + i as i64 * STEP_MS - (mix(i, 2) % JITTER_MS) as i64;
    (format!("k{:02}", mix(i, 1) % KEYS), ts)
}

fn sample(i: u64) -> (Option<Vec<u8>>, Vec<u8>) {
    let (key, ts) = record(i);
    (Some(key.into_bytes()), ts.to_be_bytes().to_vec())
}

/// The reference: for every record, every window `[s, s + size)` with `s` a
/// multiple of the advance, `s >= 0` and `s <= ts < s + size`, plus one.
fn reference(n: u64) -> BTreeMap<(String, i64), i64> {
    let mut counts = BTreeMap::new();
    for i in 0..n {
        let (key, ts) = record(i);
        let mut start = ts - ts.rem_euclid(ADVANCE_MS);
        while start > ts - SIZE_MS && start >= 0 {
            *counts.entry((key.clone(), start)).or_insert(0) += 1;
            start -= ADVANCE_MS;
        }
    }
    counts
}

fn topology(input: &str, output: &str) -> weir::topology::Topology {
    let windows = TimeWindows::of_size_with_grace(
        Duration::from_millis(SIZE_MS as u64),
        Duration::from_millis(GRACE_MS as u64),
    )
    .unwrap()
    .advance_by(Duration::from_millis(ADVANCE_MS as u64))
    .unwrap();
    let builder = StreamsBuilder::new();
    builder
        .stream::<String, i64>(
            input,
            Consumed::with(StringSerde, I64Serde)
                .with_timestamp_extractor(ValueTimestamp::new(|ts: &i64| *ts)),
        )
        .group_by_key(Grouped::new())
        .windowed_by(windows)
        .count(Materialized::as_("hop-counts"))
        .to_stream()
        .to(output, Produced::new());
    builder.build().unwrap()
}

/// Input records the group `group` committed, summed over partitions.
fn committed_total(group: &str, topic: &str) -> Option<i64> {
    let consumer: BaseConsumer = common::base_config()
        .set("group.id", group)
        .set("isolation.level", "read_committed")
        .create()
        .ok()?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition(topic, p);
    }
    let got = consumer
        .committed_offsets(tpl, Duration::from_secs(10))
        .ok()?;
    Some(
        got.elements()
            .iter()
            .map(|e| match e.offset() {
                Offset::Offset(n) => n,
                _ => 0,
            })
            .sum(),
    )
}

#[test]
fn hopping_count_of_a_million_records_matches_the_reference() {
    let n = records();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let span = n as i64 * STEP_MS;
    BASE_MS.get_or_init(|| now - now.rem_euclid(SIZE_MS) - span - 5 * SIZE_MS);
    let app_id = common::unique_topic("hopping");
    let input = format!("{app_id}-in");
    let output = format!("{app_id}-counts");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(common::create_topics(&[
        (&input, PARTITIONS),
        (&output, PARTITIONS),
    ]));

    let started = Instant::now();
    common::produce_samples(&input, sample, 0, n);
    let produced_in = started.elapsed();

    let dir = tempfile::tempdir().unwrap();
    let mut config = StreamsConfig::new(&app_id, common::bootstrap());
    config.processing_guarantee = ProcessingGuarantee::ExactlyOnceV2;
    config.num_stream_threads = 2;
    config.state_dir = dir.path().to_path_buf();
    let mut app = KafkaStreams::new(topology(&input, &output), config).unwrap();
    let processing = Instant::now();
    app.start().unwrap();
    let deadline = Instant::now() + Duration::from_secs(1_200);
    loop {
        if committed_total(&app_id, &input) == Some(n as i64) {
            break;
        }
        let state = app.state();
        assert!(
            !matches!(state, AppState::Error | AppState::PendingError),
            "the application failed: {:?}",
            app.error()
        );
        assert!(
            Instant::now() < deadline,
            "not all {n} records committed within 20 minutes (committed: {:?})",
            committed_total(&app_id, &input)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let processed_in = processing.elapsed();
    assert!(app.close(Duration::from_secs(60)), "the app did not stop");

    let keys = WindowedSerde::time(StringSerde, SIZE_MS);
    let reading = Instant::now();
    let got: BTreeMap<(String, i64), i64> = common::latest_per_key(&output)
        .into_iter()
        .map(|(k, v)| {
            let w = keys.deserialize(&output, &k).expect("windowed key");
            let v = v.expect("counts are never null");
            let count = i64::from_be_bytes(v.as_slice().try_into().expect("8-byte count"));
            ((w.key, w.window.start_ms), count)
        })
        .collect();
    let read_in = reading.elapsed();
    let want = reference(n);
    let wrong: Vec<_> = want
        .iter()
        .filter(|(k, v)| got.get(k) != Some(v))
        .take(10)
        .map(|(k, v)| (k.clone(), *v, got.get(k).copied()))
        .collect();
    assert!(
        wrong.is_empty(),
        "(window, reference, last committed) differ, first 10: {wrong:?}"
    );
    assert_eq!(got.len(), want.len(), "windows in the output vs reference");
    println!(
        "hopping count (60 s / 30 s, {KEYS} keys, {PARTITIONS} partitions, 2 threads, \
         exactly_once_v2): {n} records; produced in {produced_in:?}, processed and committed \
         in {processed_in:?} ({:.0} records/s), output read in {read_in:?}; {} windows equal \
         the reference",
        n as f64 / processed_in.as_secs_f64(),
        want.len()
    );
}
