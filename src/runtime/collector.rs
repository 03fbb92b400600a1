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
/// served: serves every waiting event, then waits a millisecond while
/// librdkafka sends what is queued at once, until nothing is left.
///
/// Not `Producer::flush`: rdkafka 0.39's `BaseProducer::flush` polls in steps
/// of 100 ms and its `poll` always waits out its timeout, so every commit
/// would take at least 100 ms (measured: the stream thread then processed
/// about 1,000 records per commit interval; see BENCHMARKS.md).
///
/// Public for the benchmark's raw rdkafka loop, whose ceiling should flush
/// as fast as librdkafka allows too.
pub fn flush<C: ProducerContext>(
    producer: &BaseProducer<C>,
    timeout: Duration,
) -> Result<(), KafkaError> {
    let deadline = std::time::Instant::now() + timeout;
    while producer.in_flight_count() > 0 {
        if std::time::Instant::now() >= deadline {
            return Err(KafkaError::Flush(RDKafkaErrorCode::OperationTimedOut));
        }
        serve_events(producer);
        if producer.in_flight_count() > 0 {
            wait_sending(producer);
        }
    }
    Ok(())
}

/// Serves every event waiting in the producer's queue (delivery reports,
/// log lines).
///
/// rdkafka's `poll(0)` serves one event per call, and a delivery report
/// covers one produce request's records of one partition: a commit waiting
/// after each single report waited for each of them in turn (measured: a
/// quiet commit's 128 records took 16 ms to flush, 0.6 ms per report).
/// Each served event lowers `in_flight_count`, so serving stops once a call
/// found nothing. (A timed poll would spin on the clock below a
/// millisecond.)
fn serve_events<C: ProducerContext>(producer: &BaseProducer<C>) {
    loop {
        let before = producer.in_flight_count();
        producer.poll(Duration::ZERO);
        if producer.in_flight_count() >= before {
            return;
        }
    }
}

/// Waits a millisecond while librdkafka sends every queued record without
/// waiting out `linger.ms`.
///
/// `rd_kafka_flush` tells the broker threads to send at once for as long as
/// it runs. Under the event API rdkafka uses, it serves no delivery report:
/// it only waits for librdkafka's count of records to reach zero, and the
/// reports not yet served count, so it returns after its timeout. A plain
/// sleep instead left the last records of a commit in their partition queues
/// until `linger.ms` (5 ms) ran out: a quiet passthrough commit flushed in
/// 6 ms, and in 1.3 ms with this wait (median of 150 commits).
fn wait_sending<C: ProducerContext>(producer: &BaseProducer<C>) {
    // SAFETY: the handle is a live producer's, borrowed for the call.
    unsafe { rdkafka::bindings::rd_kafka_flush(producer.client().native_ptr(), 1) };
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
    use rdkafka::consumer::Consumer;

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

    /// A producer on the test broker whose delivery reports land in the
    /// returned events, with `linger_ms`.
    fn test_producer(linger_ms: u64) -> (ThreadProducer, std::sync::Arc<ProducerEvents>) {
        let events = std::sync::Arc::new(ProducerEvents::default());
        let producer = crate::testing::broker()
            .client_config()
            .set("linger.ms", linger_ms.to_string())
            .create_with_context(ProducerEventsContext {
                events: events.clone(),
                transactional_id: None,
            })
            .expect("creating the producer");
        (producer, events)
    }

    /// Sends `count` changelog records to `partition` of `topic`.
    fn send_changelog(producer: &ThreadProducer, topic: &str, partition: i32, count: usize) {
        let partitions = BTreeMap::new();
        let headers = crate::processor::Headers::new();
        let mut collector = KafkaCollector {
            producer,
            partitions: &partitions,
        };
        for i in 0..count {
            let value = format!("v{i}");
            collector
                .send(OutputRecord {
                    topic,
                    partition: Some(partition),
                    key: Some(b"k"),
                    value: Some(value.as_bytes()),
                    timestamp: 0,
                    headers: &headers,
                    kind: OutputKind::Changelog,
                })
                .expect("sending");
        }
    }

    /// Needs the real broker (the subject is how rdkafka serves
    /// librdkafka's delivery-report events): reports of several produce
    /// requests that have all arrived are served by one `serve_events`, not
    /// one report per call.
    #[test]
    fn one_serve_takes_every_waiting_delivery_report() {
        let broker = crate::testing::broker();
        let topic = crate::testing::unique_name("serve-events");
        broker.create_topics(&[(&topic, 4)]);
        let (producer, events) = test_producer(0);
        for partition in 0..4 {
            send_changelog(&producer, &topic, partition, 5);
        }
        // Every record is on the broker, so its acknowledgement is on its
        // way; two seconds later (room for a loaded CI machine) every report is
        // queued, unserved.
        let watcher: rdkafka::consumer::BaseConsumer = broker
            .client_config()
            .create()
            .expect("creating the watermark reader");
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        for partition in 0..4 {
            loop {
                let (_, high) = watcher
                    .fetch_watermarks(&topic, partition, Duration::from_secs(5))
                    .expect("reading watermarks");
                if high == 5 {
                    break;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "records not on the broker"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        std::thread::sleep(Duration::from_secs(2));
        assert!(
            producer.in_flight_count() > 0,
            "the reports wait to be served"
        );

        serve_events(&producer);

        let offsets: Vec<_> = (0..4).map(|p| events.changelog_offset(&topic, p)).collect();
        assert_eq!(offsets, vec![Some(4); 4], "every partition's report served");
        assert_eq!(producer.in_flight_count(), 0);
    }

    /// Needs the real broker: `flush` sends records that would otherwise
    /// wait out `linger.ms` (two minutes here, far past its timeout).
    #[test]
    fn flush_sends_records_still_lingering() {
        let broker = crate::testing::broker();
        let topic = crate::testing::unique_name("flush-linger");
        broker.create_topics(&[(&topic, 1)]);
        let (producer, events) = test_producer(120_000);
        send_changelog(&producer, &topic, 0, 3);

        flush(&producer, Duration::from_secs(60)).expect("flushed within the timeout");

        assert_eq!(events.changelog_offset(&topic, 0), Some(2));
        assert_eq!(producer.in_flight_count(), 0);
    }
}
