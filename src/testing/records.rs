//! Producing to and reading back from the test broker.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Headers as _;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Message, Offset, TopicPartitionList};

use super::{TestBroker, unique_name};

/// How long reading a topic to its end may take before it is a failure.
const READ_TIMEOUT: Duration = Duration::from_secs(120);

/// Which records a reader sees (`isolation.level`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isolation {
    /// Only records of committed transactions and records written outside
    /// transactions: what a downstream exactly-once consumer sees.
    ReadCommitted,
    /// Every record written, including those of open and aborted transactions.
    ReadUncommitted,
}

impl Isolation {
    fn as_str(self) -> &'static str {
        match self {
            Isolation::ReadCommitted => "read_committed",
            Isolation::ReadUncommitted => "read_uncommitted",
        }
    }
}

/// A record read back from a topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadRecord {
    /// The partition it was read from.
    pub partition: i32,
    /// Its offset.
    pub offset: i64,
    /// Its key, `None` for a null key.
    pub key: Option<Vec<u8>>,
    /// Its value, `None` for a null value (a tombstone).
    pub value: Option<Vec<u8>>,
    /// Its timestamp (ms since the epoch), if it has one.
    pub timestamp: Option<i64>,
    /// Its headers, in order.
    pub headers: Vec<(String, Option<Vec<u8>>)>,
}

impl ReadRecord {
    /// The last value of header `key` as (lossy) UTF-8 text, if present.
    pub fn header(&self, key: &str) -> Option<String> {
        self.headers
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .and_then(|(_, v)| v.as_ref().map(|v| String::from_utf8_lossy(v).into_owned()))
    }
}

impl TestBroker {
    /// Produces `records` as (key, value) to `topic` with an idempotent
    /// producer, partitioned by key with the Java-compatible
    /// `murmur2_random` partitioner (as Weir and Kafka Streams partition),
    /// and waits until every record is acknowledged. Returns how many were
    /// written. Not transactional: `read_committed` readers see them at once.
    ///
    /// # Panics
    ///
    /// When a record cannot be produced or the flush does not finish within 60 s.
    pub fn produce<K, V>(
        &self,
        topic: &str,
        records: impl IntoIterator<Item = (Option<K>, V)>,
    ) -> u64
    where
        K: AsRef<[u8]>,
        V: AsRef<[u8]>,
    {
        let producer: ThreadedProducer<DefaultProducerContext> = self
            .client_config()
            .set("enable.idempotence", "true")
            .set("partitioner", "murmur2_random")
            .set("linger.ms", "5")
            .create()
            .expect("creating the producer failed");
        let mut written = 0;
        for (key, value) in records {
            let mut record = BaseRecord::<[u8], [u8]>::to(topic).payload(value.as_ref());
            if let Some(key) = key.as_ref() {
                record = record.key(key.as_ref());
            }
            loop {
                match producer.send(record) {
                    Ok(()) => break,
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                        record = back;
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err((e, _)) => panic!("producing to {topic} failed: {e}"),
                }
            }
            written += 1;
        }
        producer
            .flush(Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("flushing the records for {topic} failed: {e}"));
        written
    }

    /// Reads every partition of `topic` from the beginning to its current
    /// end with `isolation.level=read_committed`, in partition then offset
    /// order: what an exactly-once consumer downstream of your application
    /// would see.
    ///
    /// # Panics
    ///
    /// When the topic does not exist or reading takes over 120 s.
    pub fn read_committed(&self, topic: &str) -> Vec<ReadRecord> {
        self.read_to_end(topic, Isolation::ReadCommitted)
    }

    /// As [`read_committed`](Self::read_committed), with the given isolation.
    ///
    /// The end of a partition is its last stable offset under
    /// `read_committed`: reading waits until transactions open on it finish.
    pub fn read_to_end(&self, topic: &str, isolation: Isolation) -> Vec<ReadRecord> {
        let consumer: BaseConsumer = self
            .client_config()
            .set("group.id", unique_name("weir-testing-reader"))
            .set("isolation.level", isolation.as_str())
            .set("enable.partition.eof", "true")
            .set("enable.auto.commit", "false")
            .create()
            .expect("creating the reader failed");
        let partitions = partitions_of(&consumer, topic);
        let mut assignment = TopicPartitionList::new();
        for p in &partitions {
            assignment
                .add_partition_offset(topic, *p, Offset::Beginning)
                .expect("building the assignment failed");
        }
        consumer
            .assign(&assignment)
            .unwrap_or_else(|e| panic!("assigning the partitions of {topic} failed: {e}"));
        let mut at_end: HashSet<i32> = HashSet::new();
        let mut records = Vec::new();
        let deadline = Instant::now() + READ_TIMEOUT;
        while at_end.len() < partitions.len() {
            assert!(
                Instant::now() < deadline,
                "reading {topic} to its end took over {READ_TIMEOUT:?}"
            );
            match consumer.poll(Duration::from_millis(200)) {
                None => {}
                Some(Ok(m)) => {
                    at_end.remove(&m.partition());
                    records.push(read_record(&m));
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

    /// The last value of every key in `topic` (`read_committed`), in key
    /// order: the table an output changelog describes. A null key counts as
    /// the empty key; a null value (tombstone) stays as `None`.
    pub fn latest_per_key(&self, topic: &str) -> BTreeMap<Vec<u8>, Option<Vec<u8>>> {
        self.read_committed(topic)
            .into_iter()
            .map(|r| (r.key.unwrap_or_default(), r.value))
            .collect()
    }

    /// Reads `topic` (`read_committed`) again and again until `done` holds
    /// for its records, and returns them: how a test waits for the output of
    /// an application running in the background.
    ///
    /// # Panics
    ///
    /// When `done` does not hold within `timeout`; the message shows how many
    /// records there were.
    pub fn wait_for(
        &self,
        topic: &str,
        timeout: Duration,
        done: impl Fn(&[ReadRecord]) -> bool,
    ) -> Vec<ReadRecord> {
        let deadline = Instant::now() + timeout;
        loop {
            let records = self.read_committed(topic);
            if done(&records) {
                return records;
            }
            assert!(
                Instant::now() < deadline,
                "{topic}: the condition did not hold within {timeout:?}; {} committed records",
                records.len()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

fn partitions_of(consumer: &BaseConsumer, topic: &str) -> Vec<i32> {
    let metadata = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("fetching the metadata of {topic} failed: {e}"));
    let partitions: Vec<i32> = metadata
        .topics()
        .first()
        .filter(|t| t.error().is_none())
        .map(|t| t.partitions().iter().map(|p| p.id()).collect())
        .unwrap_or_default();
    assert!(
        !partitions.is_empty(),
        "topic {topic} has no partitions (does it exist?)"
    );
    partitions
}

fn read_record<M: Message>(m: &M) -> ReadRecord {
    ReadRecord {
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
    }
}
