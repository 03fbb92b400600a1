//! [`KafkaChangelog`]: changelog records from the broker.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Message, Offset, TopicPartitionList};

use super::{ChangelogBatch, ChangelogSource};
use crate::runtime::StreamsError;
use crate::runtime::end_of_partition::RestoreConsumer;

/// Reads changelog partitions with a consumer outside the group
/// (`clients::restore_consumer`: `read_committed`, so records of aborted
/// transactions never reach a store, and `enable.partition.eof`, so the end
/// of a partition is reported even when its last offsets are transaction
/// markers).
///
/// librdkafka reports a partition's end by partition number only; the end
/// of partition `p` is taken as the end of `p` of every assigned topic. A
/// reader that relies on ends ([`super::ReadMode::ToEnd`]) therefore reads
/// at most one partition of each number at a time, as the restore does.
pub(crate) struct KafkaChangelog {
    consumer: Arc<RestoreConsumer>,
    /// topic → (partition, part) of what is assigned.
    parts: HashMap<String, Vec<(i32, usize)>>,
}

impl KafkaChangelog {
    /// A source reading through `consumer`, which it assigns and unassigns.
    pub(crate) fn new(consumer: Arc<RestoreConsumer>) -> Self {
        KafkaChangelog {
            consumer,
            parts: HashMap::new(),
        }
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
        while !batch.is_full() {
            let Some(polled) = self.consumer.poll(wait) else {
                break;
            };
            // Take what librdkafka already holds without waiting again.
            wait = Duration::ZERO;
            match polled {
                Ok(m) => {
                    if let Some(part) = self.part_of(m.topic(), m.partition()) {
                        batch.push(part, m.offset(), m.key(), m.payload());
                    }
                }
                Err(KafkaError::PartitionEOF(partition)) => {
                    for parts in self.parts.values() {
                        for &(p, part) in parts {
                            if p == partition {
                                batch.push_end(part);
                            }
                        }
                    }
                }
                Err(e) => return Err(StreamsError::kafka("reading changelog records", e)),
            }
        }
        Ok(())
    }
}
