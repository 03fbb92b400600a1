//! [`KafkaChangelog`]: changelog records from the broker.

use std::collections::HashMap;
use std::ffi::CStr;
use std::sync::Arc;
use std::time::Duration;

use rdkafka::bindings as rd;
use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

use super::{ChangelogBatch, ChangelogSource};
use crate::runtime::StreamsError;
use crate::runtime::end_of_partition::RestoreConsumer;

/// Reads changelog partitions with a consumer outside the group
/// (`clients::restore_consumer`: `read_committed`, so records of aborted
/// transactions never reach a store, and `enable.partition.eof`, so the end
/// of a partition is reported even when its last offsets are transaction
/// markers).
///
/// Records and ends are taken in batches straight from the consumer's queue
/// (`rd_kafka_consume_batch_queue`). rdkafka's `poll` returns one record
/// per call, and each call read the clock and allocated: a fifth of a full
/// restore's time. Its end of a partition also names the partition number
/// only, where librdkafka's message names the topic too, so partitions of
/// the same number of different changelogs can be read at once.
pub(crate) struct KafkaChangelog {
    /// Declared before `consumer`: dropped while the consumer still lives.
    queue: ConsumerQueue,
    consumer: Arc<RestoreConsumer>,
    /// topic → (partition, part) of what is assigned.
    parts: HashMap<String, Vec<(i32, usize)>>,
    /// The topic handle and partition of the last record and its part:
    /// records come in runs of one partition, and finding the part from
    /// the topic's name (its length, UTF-8 check and hash) for each record
    /// was a tenth of the thread's time in a full restore. The handle's
    /// address is compared, never read; forgotten at every assignment.
    last: Option<(usize, i32, Option<usize>)>,
}

impl KafkaChangelog {
    /// A source reading through `consumer`, which it assigns and unassigns.
    pub(crate) fn new(consumer: Arc<RestoreConsumer>) -> Self {
        KafkaChangelog {
            queue: ConsumerQueue::of(&consumer),
            consumer,
            parts: HashMap::new(),
            last: None,
        }
    }

    /// The part of a record of `m`'s topic and partition, if assigned.
    fn part_of_message(&mut self, m: &rd::rd_kafka_message_t) -> Option<usize> {
        let rkt = m.rkt as usize;
        if let Some((last_rkt, partition, part)) = self.last
            && last_rkt == rkt
            && partition == m.partition
        {
            return part;
        }
        let part = topic_of(m).and_then(|t| self.part_of(t, m.partition));
        self.last = Some((rkt, m.partition, part));
        part
    }

    fn part_of(&self, topic: &str, partition: i32) -> Option<usize> {
        let parts = self.parts.get(topic)?;
        parts
            .iter()
            .find(|(p, _)| *p == partition)
            .map(|(_, part)| *part)
    }
}

impl ChangelogSource for KafkaChangelog {
    fn watermarks(
        &mut self,
        topic: &str,
        partition: i32,
        timeout: Duration,
    ) -> Result<(i64, i64), StreamsError> {
        let mut result = self.consumer.fetch_watermarks(topic, partition, timeout);
        if matches!(
            result.as_ref().err().and_then(|e| e.rdkafka_error_code()),
            Some(RDKafkaErrorCode::UnknownPartition | RDKafkaErrorCode::UnknownTopicOrPartition)
        ) {
            // librdkafka answers from its metadata cache, which a broker
            // outage can leave without the partition until the next periodic
            // refresh (5 min): a restore then failed every attempt at once
            // (cluster_failover: 3 minutes of retries after a broker pause).
            // Asking the broker for the topic refreshes the cache.
            let _ = self.consumer.fetch_metadata(Some(topic), timeout);
            result = self.consumer.fetch_watermarks(topic, partition, timeout);
        }
        result.map_err(|e| {
            StreamsError::kafka(
                format!("reading the watermarks of changelog {topic}/{partition}"),
                e,
            )
        })
    }

    fn assign(&mut self, from: &[(&str, i32, i64)]) -> Result<(), StreamsError> {
        self.parts.clear();
        self.last = None;
        if from.is_empty() {
            return self
                .consumer
                .unassign()
                .map_err(|e| StreamsError::kafka("releasing the changelog partitions", e));
        }
        let mut tpl = TopicPartitionList::new();
        for (part, &(topic, partition, offset)) in from.iter().enumerate() {
            tpl.add_partition_offset(topic, partition, Offset::Offset(offset))
                .map_err(|e| StreamsError::kafka("building the changelog assignment", e))?;
            self.parts
                .entry(topic.to_string())
                .or_default()
                .push((partition, part));
        }
        self.consumer
            .assign(&tpl)
            .map_err(|e| StreamsError::kafka("assigning changelog partitions", e))
    }

    fn poll(&mut self, wait: Duration, batch: &mut ChangelogBatch) -> Result<(), StreamsError> {
        let mut wait = wait;
        let mut taken = [std::ptr::null_mut(); TAKE];
        while !batch.is_full() {
            let room = batch.room().min(TAKE);
            let count = self.queue.take(wait, &mut taken[..room])?;
            if count == 0 {
                break;
            }
            // Take what librdkafka already holds without waiting again.
            wait = Duration::ZERO;
            let messages = Taken(&taken[..count]);
            for &m in messages.0 {
                // SAFETY: librdkafka returned `m` and it lives until
                // `messages` is dropped; its fields are read, not kept.
                let m = unsafe { &*m };
                match m.err {
                    rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR => {
                        if let Some(part) = self.part_of_message(m) {
                            // SAFETY: as above; `push` copies the bytes.
                            let (key, value) =
                                unsafe { (bytes(m.key, m.key_len), bytes(m.payload, m.len)) };
                            batch.push(part, m.offset, key, value);
                        }
                    }
                    rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR__PARTITION_EOF => {
                        let topic = topic_of(m);
                        for (t, parts) in &self.parts {
                            if topic.is_some_and(|topic| topic != t) {
                                continue;
                            }
                            for &(p, part) in parts {
                                if p == m.partition {
                                    batch.push_end(part);
                                }
                            }
                        }
                    }
                    err => {
                        return Err(StreamsError::kafka(
                            format!(
                                "reading changelog records of {}/{}",
                                topic_of(m).unwrap_or("?"),
                                m.partition
                            ),
                            KafkaError::MessageConsumption(RDKafkaErrorCode::from(err)),
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

/// Messages taken from librdkafka in one batch at most.
const TAKE: usize = 1_000;

/// The consumer queue of a restore consumer (its fetched records and
/// consumer errors), read in batches.
struct ConsumerQueue(*mut rd::rd_kafka_queue_t);

// SAFETY: librdkafka queues may be used from any thread; the handle is
// only used through `&mut KafkaChangelog`.
unsafe impl Send for ConsumerQueue {}

impl ConsumerQueue {
    fn of(consumer: &RestoreConsumer) -> Self {
        // SAFETY: `native_ptr` is the live handle `consumer` owns; the
        // queue reference returned is ours and destroyed on drop. It is
        // null only for a consumer without `group.id`, and the restore
        // consumer always has one (`clients::restore_config`).
        let queue = unsafe { rd::rd_kafka_queue_get_consumer(consumer.client().native_ptr()) };
        assert!(!queue.is_null(), "the restore consumer has a group.id");
        ConsumerQueue(queue)
    }

    /// Takes up to `into.len()` messages, waiting up to `wait` for the
    /// first; returns how many. The caller destroys them ([`Taken`]).
    ///
    /// `rd_kafka_consume_batch_queue` waits until the batch is full or its
    /// timeout has passed, so it is only asked for what is queued already;
    /// the wait for a first message is `rd_kafka_consume_queue`'s, which
    /// returns as soon as one arrives (the end of a tail restore would
    /// otherwise wait out the whole slice).
    fn take(
        &mut self,
        wait: Duration,
        into: &mut [*mut rd::rd_kafka_message_t],
    ) -> Result<usize, StreamsError> {
        let queued = self.take_queued(into)?;
        if queued > 0 || wait.is_zero() || into.is_empty() {
            return Ok(queued);
        }
        let wait_ms = i32::try_from(wait.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: the queue is live; the message returned is the caller's
        // to destroy. Null when none came within the wait.
        let first = unsafe { rd::rd_kafka_consume_queue(self.0, wait_ms) };
        if first.is_null() {
            return Ok(0);
        }
        into[0] = first;
        match self.take_queued(&mut into[1..]) {
            Ok(more) => Ok(1 + more),
            Err(e) => {
                drop(Taken(&into[..1]));
                Err(e)
            }
        }
    }

    /// Takes up to `into.len()` of the messages queued now, without
    /// waiting.
    fn take_queued(
        &mut self,
        into: &mut [*mut rd::rd_kafka_message_t],
    ) -> Result<usize, StreamsError> {
        if into.is_empty() {
            return Ok(0);
        }
        // SAFETY: the queue is live; librdkafka writes at most `into.len()`
        // message pointers into `into`.
        let count =
            unsafe { rd::rd_kafka_consume_batch_queue(self.0, 0, into.as_mut_ptr(), into.len()) };
        usize::try_from(count).map_err(|_| {
            // SAFETY: reads this thread's last librdkafka error.
            let err = unsafe { rd::rd_kafka_last_error() };
            StreamsError::kafka(
                "reading changelog records",
                KafkaError::MessageConsumption(RDKafkaErrorCode::from(err)),
            )
        })
    }
}

impl Drop for ConsumerQueue {
    fn drop(&mut self) {
        // SAFETY: the reference taken in `of`, destroyed once.
        unsafe { rd::rd_kafka_queue_destroy(self.0) }
    }
}

/// Messages taken in one batch, destroyed when dropped (also on an early
/// return).
struct Taken<'a>(&'a [*mut rd::rd_kafka_message_t]);

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        for &m in self.0 {
            // SAFETY: each was returned by `rd_kafka_consume_batch_queue`
            // or `rd_kafka_consume_queue` and is destroyed once, here.
            unsafe { rd::rd_kafka_message_destroy(m) }
        }
    }
}

/// The topic of a message, when it names one.
fn topic_of(m: &rd::rd_kafka_message_t) -> Option<&str> {
    if m.rkt.is_null() {
        return None;
    }
    // SAFETY: a message's topic handle lives as long as the message, and
    // its name is NUL-terminated.
    unsafe { CStr::from_ptr(rd::rd_kafka_topic_name(m.rkt)) }
        .to_str()
        .ok()
}

/// The bytes at `ptr`, or `None` for a null pointer (a null key or value).
///
/// # Safety
/// `ptr` is null or points at `len` bytes that outlive the returned slice.
unsafe fn bytes<'a>(ptr: *const std::ffi::c_void, len: usize) -> Option<&'a [u8]> {
    // SAFETY: by the caller.
    (!ptr.is_null()).then(|| unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) })
}
