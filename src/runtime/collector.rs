//! The runtime's [`RecordCollector`]: task output into the thread's producer.
//!
//! Every record a task emits (sink, repartition, changelog, dead letter) is
//! handed to librdkafka, which copies it; under exactly-once it joins the
//! thread's open transaction. Delivery reports are read on the stream
//! thread (in `poll`/`flush`), where [`ProducerEvents`] records, per
//! changelog partition, the offset of the last delivered record: the offset
//! a store commits with (see [`crate::state`]'s commit invariant), and the
//! first delivery error, which fails the commit.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use rdkafka::ClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header as KafkaHeader, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};

use crate::processor::{CollectorError, OutputKind, OutputRecord, RecordCollector};

/// Delivery-report bookkeeping of one producer.
#[derive(Default)]
pub(crate) struct ProducerEvents {
    /// topic → partition → offset of the last delivered changelog record.
    changelog_offsets: Mutex<HashMap<String, HashMap<i32, i64>>>,
    /// The first delivery error since the last [`ProducerEvents::take_error`].
    error: Mutex<Option<KafkaError>>,
    /// Counts acknowledged output records by topic (when metered).
    produced: Option<prometheus::IntCounterVec>,
    /// `produced`'s counter of each topic delivered to so far: looked up
    /// by label once per topic, not once per record (hashing the label and
    /// taking the vector's lock was ~2% of a passthrough thread's time).
    produced_by_topic: Mutex<Vec<(String, prometheus::IntCounter)>>,
}

impl ProducerEvents {
    /// Events that count acknowledged output records in `produced`.
    pub(crate) fn metered(produced: prometheus::IntCounterVec) -> Self {
        ProducerEvents {
            produced: Some(produced),
            ..ProducerEvents::default()
        }
    }

    /// Records that an output (non-changelog) record of `topic` was delivered.
    fn output_delivered(&self, topic: &str) {
        let Some(produced) = &self.produced else {
            return;
        };
        let mut counters = self.produced_by_topic.lock().expect("producer events lock");
        if let Some((_, counter)) = counters.iter().find(|(t, _)| t == topic) {
            counter.inc();
            return;
        }
        let counter = produced.with_label_values(&[topic]);
        counter.inc();
        counters.push((topic.to_string(), counter));
    }

    /// The offset of the last delivered record of `topic`/`partition`.
    pub(crate) fn changelog_offset(&self, topic: &str, partition: i32) -> Option<i64> {
        let map = self.changelog_offsets.lock().expect("producer events lock");
        map.get(topic).and_then(|p| p.get(&partition)).copied()
    }

    /// Records that the changelog record at `offset` of `topic`/`partition`
    /// was delivered.
    pub(crate) fn changelog_delivered(&self, topic: &str, partition: i32, offset: i64) {
        let mut map = self.changelog_offsets.lock().expect("producer events lock");
        let partitions = match map.get_mut(topic) {
            Some(p) => p,
            None => map.entry(topic.to_string()).or_default(),
        };
        let entry = partitions.entry(partition).or_insert(-1);
        *entry = (*entry).max(offset);
    }

    /// Records a failed delivery; the first one fails the next commit.
    pub(crate) fn delivery_failed(&self, error: KafkaError) {
        let mut slot = self.error.lock().expect("producer events lock");
        if slot.is_none() {
            *slot = Some(error);
        }
    }

    /// Takes the first delivery error seen, if any.
    pub(crate) fn take_error(&self) -> Option<KafkaError> {
        self.error.lock().expect("producer events lock").take()
    }
}

const OPAQUE_OUTPUT: usize = 0;
const OPAQUE_CHANGELOG: usize = 1;

impl ClientContext for ProducerEventsContext {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, facility: &str, message: &str) {
        super::client_log::client_log(level, facility, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        super::client_log::client_error(&error, reason);
    }
}

/// The producer's context: routes delivery reports into [`ProducerEvents`].
pub(crate) struct ProducerEventsContext {
    pub(crate) events: std::sync::Arc<ProducerEvents>,
    /// The producer's transactional id, under exactly-once.
    pub(crate) transactional_id: Option<String>,
}

impl ProducerContext for ProducerEventsContext {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, opaque: usize) {
        match result {
            Ok(message) if opaque == OPAQUE_CHANGELOG => {
                self.events.changelog_delivered(
                    message.topic(),
                    message.partition(),
                    message.offset(),
                );
            }
            Ok(message) => self.events.output_delivered(message.topic()),
            Err((
                KafkaError::MessageProduction(
                    RDKafkaErrorCode::PurgeQueue | RDKafkaErrorCode::PurgeInflight,
                ),
                _,
            )) => {
                // Purged on purpose by an abort: not a delivery failure.
            }
            Err((error, message)) => {
                tracing::error!(topic = message.topic(), %error, "record delivery failed");
                self.events.delivery_failed(error.clone());
            }
        }
    }
}

/// The producer type of a stream thread.
pub(crate) type ThreadProducer = BaseProducer<ProducerEventsContext>;

/// Waits until every record sent is acknowledged and its delivery report
/// served, polling every 0.5 ms.
///
/// Not `Producer::flush`: rdkafka 0.39's `BaseProducer::flush` polls in steps
/// of 100 ms and its `poll` always waits out its timeout, so every commit
/// would take at least 100 ms (measured: the stream thread then processed
/// about 1,000 records per commit interval; see BENCHMARKS.md).
pub(crate) fn flush(producer: &ThreadProducer, timeout: Duration) -> Result<(), KafkaError> {
    let deadline = std::time::Instant::now() + timeout;
    while producer.in_flight_count() > 0 {
        if std::time::Instant::now() >= deadline {
            return Err(KafkaError::Flush(RDKafkaErrorCode::OperationTimedOut));
        }
        // poll(0) serves what is there; a timed poll would spin on the clock.
        producer.poll(Duration::ZERO);
        if producer.in_flight_count() > 0 {
            std::thread::sleep(Duration::from_micros(500));
        }
    }
    Ok(())
}

/// How long a send waits for room in librdkafka's queue before it fails
/// (a transient error: the thread aborts, which purges the queue, and
/// rewinds). Normally room comes within milliseconds; a producer that
/// cannot deliver (its transaction coordinator gone, an epoch bump
/// pending) never makes room, and waiting on would keep the thread from
/// polling, from its shutdown and from the group (a chaos run saw a
/// thread stall until `max.poll.interval.ms` expelled it).
const QUEUE_FULL_WAIT: Duration = Duration::from_secs(30);

/// Sends task output through `producer`.
pub(crate) struct KafkaCollector<'a> {
    pub(crate) producer: &'a ThreadProducer,
    pub(crate) partitions: &'a BTreeMap<String, i32>,
}

impl RecordCollector for KafkaCollector<'_> {
    fn send(&mut self, record: OutputRecord<'_>) -> Result<(), CollectorError> {
        let opaque = if record.kind == OutputKind::Changelog {
            OPAQUE_CHANGELOG
        } else {
            OPAQUE_OUTPUT
        };
        let mut base = BaseRecord::<[u8], [u8], usize>::with_opaque_to(record.topic, opaque)
            .timestamp(record.timestamp);
        if let Some(key) = record.key {
            base = base.key(key);
        }
        if let Some(value) = record.value {
            base = base.payload(value);
        }
        if let Some(partition) = record.partition {
            base = base.partition(partition);
        }
        if !record.headers.is_empty() {
            let headers = record
                .headers
                .iter()
                .fold(OwnedHeaders::new(), |h, header| {
                    h.insert(KafkaHeader {
                        key: &header.key,
                        value: header.value.as_deref(),
                    })
                });
            base = base.headers(headers);
        }
        let mut full_since: Option<std::time::Instant> = None;
        loop {
            match self.producer.send(base) {
                Ok(()) => return Ok(()),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back))
                    if full_since.is_none_or(|t| t.elapsed() < QUEUE_FULL_WAIT) =>
                {
                    // librdkafka's queue is full: serve delivery reports, then retry.
                    full_since.get_or_insert_with(std::time::Instant::now);
                    base = back;
                    self.producer.poll(Duration::from_millis(10));
                }
                Err((error, _)) => {
                    return Err(CollectorError {
                        topic: record.topic.to_string(),
                        source: Box::new(error),
                    });
                }
            }
        }
    }

    fn partition_count(&self, topic: &str) -> Option<i32> {
        self.partitions.get(topic).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delivered_output_is_counted_per_topic() {
        let produced = prometheus::IntCounterVec::new(
            prometheus::Opts::new("produced", "produced"),
            &["topic"],
        )
        .unwrap();
        let events = ProducerEvents::metered(produced.clone());
        for topic in ["a", "b", "a", "a", "c", "b"] {
            events.output_delivered(topic);
        }
        let count = |t: &str| produced.with_label_values(&[t]).get();
        assert_eq!((count("a"), count("b"), count("c")), (3, 2, 1));
        assert_eq!(count("d"), 0);
        let cached = events.produced_by_topic.lock().unwrap().len();
        assert_eq!(cached, 3, "one cached counter per topic");
        let unmetered = ProducerEvents::default();
        unmetered.output_delivered("a");
        let cached = unmetered.produced_by_topic.lock().unwrap().len();
        assert_eq!(cached, 0, "events without a counter vector cache nothing");
    }
}
