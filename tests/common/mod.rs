//! What Weir's integration tests share. The broker, topics, producing and
//! reading are the public harness `weir::testing` (which broker: the
//! `KAFKA_BOOTSTRAP_SERVERS` one, else a testcontainers `apache/kafka`,
//! else the test fails and says how to start one); this module keeps the
//! names the tests use and what only Weir's tests need: `weir run` child
//! processes and multi-process counting runs.
#![allow(dead_code)] // each test binary uses a different part of the harness

pub mod counting;
pub mod weir_app;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use weir::testing::{Isolation, TestBroker};
use weir::topologies::SampleFn;

pub use weir::testing::ReadRecord;

/// The broker of this test process.
pub fn broker() -> &'static TestBroker {
    weir::testing::broker()
}

/// The bootstrap address of the broker the tests use.
pub fn bootstrap() -> String {
    broker().bootstrap_servers().to_string()
}

/// A topic name unique to this test process and call.
pub fn unique_topic(prefix: &str) -> String {
    weir::testing::unique_name(prefix)
}

/// Creates topics (name, partitions) and waits until they are visible.
pub async fn create_topics(topics: &[(&str, i32)]) {
    broker().create_topics(topics);
}

/// Deletes topics; missing ones are ignored.
pub async fn delete_topics(topics: &[&str]) {
    broker().delete_topics(topics);
}

/// Client settings every harness client shares.
pub fn base_config() -> ClientConfig {
    broker().client_config()
}

/// Produces `records` (key, value) to `topic` and waits until all are acknowledged.
pub fn produce_batch(topic: &str, records: &[(Option<Vec<u8>>, Vec<u8>)]) {
    broker().produce(topic, records.iter().map(|(k, v)| (k.as_ref(), v)));
}

/// Writes `rate` records per second to `topic` until `stop`: record `n` has
/// key `k{n % keys}` and value `v{n}`. Returns how many it wrote.
pub fn produce_at_rate(
    topic: &str,
    rate: u64,
    keys: u64,
    stop: &std::sync::atomic::AtomicBool,
) -> u64 {
    use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
    let producer: ThreadedProducer<DefaultProducerContext> = base_config()
        .set("linger.ms", "5")
        .create()
        .expect("producer");
    let started = Instant::now();
    let mut sent = 0u64;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let due = (started.elapsed().as_secs_f64() * rate as f64) as u64;
        while sent < due {
            let (key, value) = (format!("k{}", sent % keys), format!("v{sent}"));
            if producer
                .send(BaseRecord::to(topic).key(&key).payload(&value))
                .is_ok()
            {
                sent += 1;
            } else {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
    sent
}

/// Writes the shipped topology's sample records `start..start + count` to `topic`.
pub fn produce_samples(topic: &str, sample: SampleFn, start: u64, count: u64) {
    broker().produce(topic, (start..start + count).map(sample));
}

/// Reads every partition of `topic` to its current end with `read_committed`.
pub fn read_to_end(topic: &str) -> Vec<ReadRecord> {
    broker().read_committed(topic)
}

/// Every result of `page-views` in `topic` (read_committed) as (page,
/// window start, count), in read order.
pub fn page_view_results(topic: &str) -> Vec<(String, i64, i64)> {
    use weir::serdes::{Serde, StringSerde};
    let keys =
        weir::windows::WindowedSerde::time(StringSerde, weir::topologies::page_views::WINDOW_MS);
    read_to_end(topic)
        .into_iter()
        .map(|r| {
            let k = keys
                .deserialize(topic, r.key.as_deref().expect("windowed key"))
                .expect("decoding a windowed key");
            let v = r.value.as_deref().expect("emit-final never sends null");
            let count = i64::from_be_bytes(v.try_into().expect("8-byte count"));
            (k.key, k.window.start_ms, count)
        })
        .collect()
}

/// As [`read_to_end`], with the given `isolation.level`.
pub fn read_to_end_with(topic: &str, isolation: &str) -> Vec<ReadRecord> {
    let isolation = match isolation {
        "read_committed" => Isolation::ReadCommitted,
        "read_uncommitted" => Isolation::ReadUncommitted,
        other => panic!("unknown isolation.level {other}"),
    };
    broker().read_to_end(topic, isolation)
}

/// The latest value per key of `topic` (`read_committed`).
pub fn latest_per_key(topic: &str) -> BTreeMap<Vec<u8>, Option<Vec<u8>>> {
    broker().latest_per_key(topic)
}

/// Polls each consumer in turn until `done` holds for all their assignments
/// (as topic → partitions), or panics after `timeout`.
pub fn poll_until_assigned(
    consumers: &[&BaseConsumer],
    timeout: Duration,
    done: impl Fn(&[HashMap<String, HashSet<i32>>]) -> bool,
) -> Vec<HashMap<String, HashSet<i32>>> {
    let deadline = Instant::now() + timeout;
    loop {
        for c in consumers {
            let _ = c.poll(Duration::from_millis(50));
        }
        let assignments: Vec<_> = consumers
            .iter()
            .map(|c| {
                let mut by_topic: HashMap<String, HashSet<i32>> = HashMap::new();
                for e in c
                    .assignment()
                    .expect("reading the assignment failed")
                    .elements()
                {
                    by_topic
                        .entry(e.topic().to_string())
                        .or_default()
                        .insert(e.partition());
                }
                by_topic
            })
            .collect();
        if done(&assignments) {
            return assignments;
        }
        assert!(
            Instant::now() < deadline,
            "the group did not reach the expected assignment within {timeout:?}: {assignments:?}"
        );
    }
}

/// A local port `p` with `p + 1 .. p + n` free too (a broker of a test's
/// own: client, controller and secure listener ports; a cluster's nodes).
///
/// Chosen below the kernel's ephemeral range (20000..29000 here; Linux
/// hands out 32768 and up to outgoing connections): a broker the test
/// restarts must find its ports free again, and a client's outgoing
/// connection that happened to get one of them as its local port would
/// make the restart fail with "Address already in use".
pub fn free_port_run(n: u16) -> u16 {
    use std::time::{SystemTime, UNIX_EPOCH};
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0)
        ^ std::process::id();
    let (low, span) = (20_000u32, 9_000u32 - u32::from(n));
    for attempt in 0..200u32 {
        let port = (low + (seed.wrapping_add(attempt.wrapping_mul(7_919))) % span) as u16;
        if (0..n).all(|i| std::net::TcpListener::bind(("127.0.0.1", port + i)).is_ok()) {
            return port;
        }
    }
    panic!("no {n} consecutive free local ports in 20000..29000");
}
