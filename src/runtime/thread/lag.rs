//! Whether an input partition has records the consumer has not delivered
//! yet: what the buffers' fetch wait asks before each processing round
//! (`runtime::buffer`), as Kafka Streams asks its consumer's `currentLag`.
//!
//! The answer comes from the consumer's own state, without a request: the
//! high watermark of the partition's last fetch response (under
//! `read_committed` librdkafka keeps the last stable offset there) against
//! the position (after the last record or transaction marker polled).
//! While nothing of the partition was polled in this assignment the
//! position is the committed offset, or the log's start when nothing was
//! committed (`auto.offset.reset=earliest`). Read with
//! `rd_kafka_get_watermark_offsets`, which rdkafka does not wrap.

use std::collections::HashMap;
use std::ffi::CString;

use rdkafka::bindings as rd;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::{Offset, TopicPartitionList};

/// The watermarks of `topic`/`partition` from the consumer's last fetch
/// response; `None` until one answered.
fn cached_watermarks<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &str,
    partition: i32,
) -> Option<(i64, i64)> {
    let topic = CString::new(topic).ok()?;
    let (mut low, mut high) = (-1i64, -1i64);
    // SAFETY: `native_ptr` is the live handle `consumer` owns; `topic` is
    // NUL-terminated and outlives the call; the out-pointers are locals.
    let err = unsafe {
        rd::rd_kafka_get_watermark_offsets(
            consumer.client().native_ptr(),
            topic.as_ptr(),
            partition,
            &mut low,
            &mut high,
        )
    };
    (err == rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR && high >= 0).then_some((low, high))
}

/// Answers for one processing round; the positions of the assignment are
/// read once, when first needed.
pub(super) struct LagProbe<'a, C: ConsumerContext> {
    consumer: &'a BaseConsumer<C>,
    committed: &'a HashMap<(String, i32), i64>,
    positions: Option<Option<TopicPartitionList>>,
}

impl<'a, C: ConsumerContext> LagProbe<'a, C> {
    pub(super) fn new(
        consumer: &'a BaseConsumer<C>,
        committed: &'a HashMap<(String, i32), i64>,
    ) -> Self {
        Self {
            consumer,
            committed,
            positions: None,
        }
    }

    /// Whether `topic`/`partition` has records not delivered yet, or the
    /// consumer cannot tell (no fetch answered, no position known).
    pub(super) fn behind(&mut self, topic: &str, partition: i32) -> bool {
        let Some((low, high)) = cached_watermarks(self.consumer, topic, partition) else {
            return true;
        };
        let consumer = self.consumer;
        let polled = self
            .positions
            .get_or_insert_with(|| consumer.position().ok())
            .as_ref()
            .and_then(|p| p.find_partition(topic, partition))
            .and_then(|e| match e.offset() {
                Offset::Offset(o) => Some(o),
                _ => None,
            });
        let position = polled
            .or_else(|| self.committed.get(&(topic.to_string(), partition)).copied())
            .unwrap_or(low);
        position < 0 || high > position
    }
}
