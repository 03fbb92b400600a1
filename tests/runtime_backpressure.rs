//! Backpressure on the real broker: a task reading two co-partitioned
//! topics (a merge) waits `max_task_idle_ms` for the empty one; meanwhile
//! the other's partitions fill their bounded buffers and are paused, then
//! resumed once the task drains them. Nothing is lost or counted twice.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::counting::{output_counts, serial};
use weir::config::StreamsConfig;
use weir::runtime::{AppState, KafkaStreams};
use weir::topology::{Consumed, Grouped, Materialized, Produced, StreamsBuilder};

fn records(prefix: &str, n: usize) -> Vec<(Option<Vec<u8>>, Vec<u8>)> {
    (0..n)
        .map(|i| {
            let key = format!("k{}", i % 40);
            (Some(key.into_bytes()), format!("{prefix}{i}").into_bytes())
        })
        .collect()
}

#[test]
fn a_waiting_task_pauses_its_full_partitions_and_resumes_them() {
    let _serial = serial();
    let app = common::unique_topic("backpressure");
    let (left, right, out) = (
        format!("{app}-left"),
        format!("{app}-right"),
        format!("{app}-out"),
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(common::create_topics(&[(&left, 4), (&right, 4), (&out, 4)]));
    let n = 4_000;
    common::produce_batch(&left, &records("l", n));

    let builder = StreamsBuilder::new();
    let l = builder.stream::<String, String>(&left, Consumed::new());
    let r = builder.stream::<String, String>(&right, Consumed::new());
    l.merge(&r)
        .group_by_key(Grouped::as_("merged"))
        .count(Materialized::as_("merged-counts"))
        .to_stream()
        .to(&out, Produced::new());
    let topology = builder.build().unwrap();
    assert_eq!(
        topology.subtopology_count(),
        1,
        "one task reads both topics"
    );

    let state = tempfile::tempdir().unwrap();
    let config = StreamsConfig::from_pairs([
        ("application_id", app.as_str()),
        ("bootstrap_servers", &common::bootstrap()),
        ("state_dir", &state.path().display().to_string()),
        ("processing_guarantee", "exactly_once_v2"),
        ("buffered_records_per_partition", "20"),
        ("max_task_idle_ms", "1500"),
    ])
    .unwrap();
    let mut streams = KafkaStreams::new(topology, config).unwrap();
    streams.start().unwrap();
    // Let the tasks wait on the empty right side, then feed it.
    std::thread::sleep(Duration::from_secs(6));
    common::produce_batch(&right, &records("r", n));

    let mut truth = BTreeMap::new();
    for (key, _) in records("", n).into_iter().chain(records("", n)) {
        *truth
            .entry(String::from_utf8(key.unwrap()).unwrap())
            .or_insert(0i64) += 1;
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    let counts = loop {
        let counts = output_counts(&out);
        if counts == truth || Instant::now() > deadline {
            break counts;
        }
        assert_ne!(streams.state(), AppState::Error, "{:?}", streams.error());
        std::thread::sleep(Duration::from_millis(500));
    };
    let stats = streams.buffer_stats();
    assert!(streams.close(Duration::from_secs(30)));
    println!("buffers (bound 20 records per partition, max_task_idle_ms 1500): {stats:?}");
    assert_eq!(counts, truth, "pausing and resuming loses nothing");
    assert!(stats.paused > 0, "full partitions were paused: {stats:?}");
    assert!(stats.resumed > 0, "drained partitions resumed: {stats:?}");
}
