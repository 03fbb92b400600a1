//! The harness every integration test uses to reach a real Kafka broker.
//!
//! The broker is, in order:
//! 1. `KAFKA_BOOTSTRAP_SERVERS` when set (CI starts one with `scripts/kafka start`);
//! 2. a testcontainers `apache/kafka` container, when a Docker engine is reachable;
//! 3. otherwise the test fails and says how to start a broker. It never passes silently.
//!
//! Helpers: unique topic names, topic creation/deletion through the admin
//! client, producing a batch, and reading a topic to its end with
//! `read_committed`.
#![allow(dead_code)] // each test binary uses a different part of the harness

pub mod counting;
pub mod weir_app;

use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::Message;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Headers as _;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

/// Version of the `apache/kafka` image used when a Docker engine is reachable.
const KAFKA_IMAGE_TAG: &str = "4.1.1";

/// The bootstrap address of the broker the tests use. Panics with
/// instructions when there is none.
pub fn bootstrap() -> String {
    static BOOTSTRAP: OnceLock<String> = OnceLock::new();
    BOOTSTRAP
        .get_or_init(|| {
            if let Ok(servers) = std::env::var("KAFKA_BOOTSTRAP_SERVERS")
                && !servers.trim().is_empty()
            {
                return servers;
            }
            if docker_reachable() {
                return container::start();
            }
            panic!(
                "no Kafka broker for the integration tests: set KAFKA_BOOTSTRAP_SERVERS \
                 (for example: `scripts/kafka start` then \
                 `KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092 cargo test`), run `scripts/test` \
                 which starts one for you, or make a Docker engine reachable for testcontainers"
            )
        })
        .clone()
}

fn docker_reachable() -> bool {
    if let Ok(host) = std::env::var("DOCKER_HOST") {
        return !host.is_empty();
    }
    std::path::Path::new("/var/run/docker.sock").exists()
}

mod container {
    use std::sync::OnceLock;

    use testcontainers::core::{IntoContainerPort, WaitFor};
    use testcontainers::runners::SyncRunner;
    use testcontainers::{Container, GenericImage, ImageExt};

    static CONTAINER: OnceLock<Container<GenericImage>> = OnceLock::new();

    /// Starts a single-node KRaft broker configured for transactions and
    /// returns its bootstrap address. The container lives until the test
    /// process exits (the testcontainers reaper removes it).
    pub fn start() -> String {
        // The sync runner drives its own runtime: run it off any test runtime.
        std::thread::spawn(|| {
            let port = free_port();
            let image = GenericImage::new("apache/kafka", super::KAFKA_IMAGE_TAG)
                .with_wait_for(WaitFor::message_on_stdout("Kafka Server started"))
                // The image replaces its default config when any variable is set,
                // so every setting a single-node transactional broker needs is here.
                .with_env_var("KAFKA_NODE_ID", "1")
                .with_env_var("KAFKA_PROCESS_ROLES", "broker,controller")
                .with_env_var("KAFKA_LISTENERS", "PLAINTEXT://:9092,CONTROLLER://:9093")
                .with_env_var(
                    "KAFKA_ADVERTISED_LISTENERS",
                    format!("PLAINTEXT://127.0.0.1:{port}"),
                )
                .with_env_var("KAFKA_CONTROLLER_LISTENER_NAMES", "CONTROLLER")
                .with_env_var(
                    "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP",
                    "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
                )
                .with_env_var("KAFKA_CONTROLLER_QUORUM_VOTERS", "1@localhost:9093")
                .with_env_var("KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR", "1")
                .with_env_var("KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR", "1")
                .with_env_var("KAFKA_TRANSACTION_STATE_LOG_MIN_ISR", "1")
                .with_env_var("KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS", "0")
                .with_env_var("KAFKA_AUTO_CREATE_TOPICS_ENABLE", "false")
                .with_mapped_port(port, 9092.tcp());
            let container = image
                .start()
                .expect("starting the apache/kafka test container failed");
            let _ = CONTAINER.set(container);
            format!("127.0.0.1:{port}")
        })
        .join()
        .expect("the testcontainers start-up thread panicked")
    }

    fn free_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("no free local port for the Kafka container")
    }
}

/// A topic name unique to this test process and call.
pub fn unique_topic(prefix: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{prefix}-{}-{n}-{nanos:08x}", std::process::id())
}

fn admin() -> AdminClient<DefaultClientContext> {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .create()
        .expect("creating the admin client failed")
}

/// Creates topics (name, partitions) with replication factor 1 and waits
/// until their metadata is visible.
pub async fn create_topics(topics: &[(&str, i32)]) {
    let new: Vec<NewTopic<'_>> = topics
        .iter()
        .map(|(name, partitions)| NewTopic::new(name, *partitions, TopicReplication::Fixed(1)))
        .collect();
    let results = admin()
        .create_topics(
            &new,
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
        )
        .await
        .expect("create_topics request failed");
    for result in results {
        if let Err((topic, code)) = result {
            assert_eq!(
                code,
                RDKafkaErrorCode::TopicAlreadyExists,
                "creating topic {topic} failed: {code}"
            );
        }
    }
    let consumer: BaseConsumer = base_config().create().expect("metadata client");
    for (name, partitions) in topics {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ready = consumer
                .fetch_metadata(Some(name), Duration::from_secs(5))
                .ok()
                .and_then(|m| {
                    m.topics().first().map(|t| {
                        t.error().is_none() && t.partitions().len() == *partitions as usize
                    })
                })
                .unwrap_or(false);
            if ready {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "topic {name} did not appear within 30 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Deletes topics; missing ones are ignored.
pub async fn delete_topics(topics: &[&str]) {
    let results = admin()
        .delete_topics(topics, &AdminOptions::new())
        .await
        .expect("delete_topics request failed");
    for result in results {
        if let Err((topic, code)) = result {
            assert_eq!(
                code,
                RDKafkaErrorCode::UnknownTopicOrPartition,
                "deleting topic {topic} failed: {code}"
            );
        }
    }
}

/// Client settings every harness client shares.
pub fn base_config() -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", bootstrap());
    config
}

/// Produces `records` (key, value) to `topic` with an idempotent producer,
/// partitioned by key with the Java-compatible `murmur2_random` partitioner,
/// and waits until all are acknowledged.
pub fn produce_batch(topic: &str, records: &[(Option<Vec<u8>>, Vec<u8>)]) {
    let producer: ThreadedProducer<DefaultProducerContext> = base_config()
        .set("enable.idempotence", "true")
        .set("partitioner", "murmur2_random")
        .set("linger.ms", "5")
        .create()
        .expect("creating the producer failed");
    for (key, value) in records {
        let mut record = BaseRecord::<[u8], [u8]>::to(topic).payload(value.as_slice());
        if let Some(key) = key {
            record = record.key(key.as_slice());
        }
        let mut pending = record;
        loop {
            match producer.send(pending) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    pending = back;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err((e, _)) => panic!("producing to {topic} failed: {e}"),
            }
        }
    }
    producer
        .flush(Duration::from_secs(60))
        .expect("flushing the producer failed");
}

/// A record read back from a topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadRecord {
    /// Partition it was read from.
    pub partition: i32,
    /// Its offset.
    pub offset: i64,
    /// Its key.
    pub key: Option<Vec<u8>>,
    /// Its value.
    pub value: Option<Vec<u8>>,
    /// Its timestamp (ms), if any.
    pub timestamp: Option<i64>,
    /// Its headers, in order.
    pub headers: Vec<(String, Option<Vec<u8>>)>,
}

impl ReadRecord {
    /// The value of header `key` as text, if present.
    pub fn header(&self, key: &str) -> Option<String> {
        self.headers
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .and_then(|(_, v)| v.as_ref().map(|v| String::from_utf8_lossy(v).into_owned()))
    }
}

/// Reads every partition of `topic` from the beginning to its current end
/// with `isolation.level=read_committed`, in partition then offset order.
pub fn read_to_end(topic: &str) -> Vec<ReadRecord> {
    read_to_end_with(topic, "read_committed")
}

/// As [`read_to_end`], with the given `isolation.level`.
pub fn read_to_end_with(topic: &str, isolation: &str) -> Vec<ReadRecord> {
    let consumer: BaseConsumer = base_config()
        .set("group.id", unique_topic("harness-reader"))
        .set("isolation.level", isolation)
        .set("enable.partition.eof", "true")
        .set("enable.auto.commit", "false")
        .create()
        .expect("creating the reader failed");
    let metadata = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .expect("fetching metadata failed");
    let partitions: Vec<i32> = metadata.topics()[0]
        .partitions()
        .iter()
        .map(|p| p.id())
        .collect();
    assert!(
        !partitions.is_empty(),
        "topic {topic} has no partitions (does it exist?)"
    );
    let mut assignment = TopicPartitionList::new();
    for p in &partitions {
        assignment
            .add_partition_offset(topic, *p, Offset::Beginning)
            .expect("building the assignment failed");
    }
    consumer.assign(&assignment).expect("assign failed");
    let mut at_end: HashSet<i32> = HashSet::new();
    let mut records = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while at_end.len() < partitions.len() {
        assert!(
            Instant::now() < deadline,
            "reading {topic} to its end took over 120 s"
        );
        match consumer.poll(Duration::from_millis(200)) {
            None => {}
            Some(Ok(m)) => {
                at_end.remove(&m.partition());
                records.push(ReadRecord {
                    partition: m.partition(),
                    offset: m.offset(),
                    key: m.key().map(<[u8]>::to_vec),
                    value: m.payload().map(<[u8]>::to_vec),
                    timestamp: m.timestamp().to_millis(),
                    headers: m
                        .headers()
                        .map(|h| {
                            h.iter()
                                .map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec)))
                                .collect()
                        })
                        .unwrap_or_default(),
                });
            }
            Some(Err(KafkaError::PartitionEOF(p))) => {
                at_end.insert(p);
            }
            Some(Err(e)) => panic!("reading {topic} failed: {e}"),
        }
    }
    records.sort_by_key(|r| (r.partition, r.offset));
    records
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
