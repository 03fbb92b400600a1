//! Restoring a task's stores from their changelog topics.
//!
//! A store remembers the changelog offset its committed state reflects
//! ([`crate::state::StateStore::committed_offset`]). Restoration therefore
//! reads only the tail: from that offset + 1 (or the start of the log for a
//! new store) to the end, with `read_committed`, so records of aborted
//! transactions never enter a store. The records are written unlogged, then
//! committed together with the offset of the last one.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::{Message, Offset, TopicPartitionList};

use super::StreamsError;
use crate::metrics::RestoreMeter;
use crate::processor::TaskInstance;

/// Restored records between two store commits.
const RESTORE_COMMIT_RECORDS: u64 = 10_000;

/// What one restoration did, for logs and metrics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RestoreStats {
    /// Changelog records applied.
    pub restored: u64,
    /// Records in the changelog partitions (high watermark − low watermark),
    /// summed over the task's stores: what a full restore would have read.
    pub changelog_size: u64,
}

/// Restores every logged store of `task` (still `Created`) from partition
/// `task.id().partition` of its changelog, reporting progress to `meter`.
pub(crate) fn restore_task<C: ConsumerContext>(
    task: &mut TaskInstance,
    consumer: &BaseConsumer<C>,
    timeout: Duration,
    meter: &mut RestoreMeter,
) -> Result<RestoreStats, StreamsError> {
    let partition = task.id().partition;
    let changelogs: Vec<(String, String)> = task
        .changelog_topics()
        .map(|(s, t)| (s.to_string(), t.to_string()))
        .collect();
    let mut stats = RestoreStats::default();
    let mut last_offsets: HashMap<String, i64> = HashMap::new();
    for (store, topic) in &changelogs {
        let committed = task.store_committed_offset(store);
        let (low, high) = consumer
            .fetch_watermarks(topic, partition, timeout)
            .map_err(|e| {
                StreamsError::kafka(
                    format!("reading the end of changelog {topic}/{partition}"),
                    e,
                )
            })?;
        stats.changelog_size += (high - low).max(0) as u64;
        if let Some(c) = committed
            && c >= high
        {
            return Err(StreamsError::Store(crate::state::StoreError::Corrupt {
                store: store.clone(),
                message: format!(
                    "the local store of task {} reflects changelog offset {c}, but {topic}/{partition} ends at {high}; the changelog was deleted or reset: remove the local state (weir reset) and restart",
                    task.id()
                ),
            }));
        }
        let start = committed.map(|c| c + 1).unwrap_or(low).max(low);
        if start >= high {
            continue;
        }
        meter.store_started(store, (high - start) as u64);
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, partition, Offset::Offset(start))
            .map_err(|e| StreamsError::kafka("building the restore assignment", e))?;
        consumer.assign(&tpl).map_err(|e| {
            StreamsError::kafka(format!("assigning {topic}/{partition} for restore"), e)
        })?;
        let deadline = Instant::now() + timeout;
        let mut last = None;
        loop {
            match consumer.poll(Duration::from_millis(100)) {
                Some(Ok(m)) => {
                    task.restore(store, m.key().unwrap_or_default(), m.payload())?;
                    stats.restored += 1;
                    meter.record();
                    last = Some(m.offset());
                    if stats.restored % RESTORE_COMMIT_RECORDS == 0 {
                        // Bound the open writes; a crash here resumes from this offset.
                        let (t, o) = (topic.as_str(), m.offset());
                        task.commit(|name| (name == t).then_some(o))?;
                    }
                    if m.offset() + 1 >= high {
                        break;
                    }
                }
                Some(Err(KafkaError::PartitionEOF(_))) => break,
                Some(Err(e)) => {
                    return Err(StreamsError::kafka(
                        format!("restoring from {topic}/{partition}"),
                        e,
                    ));
                }
                None => {}
            }
            if Instant::now() > deadline {
                return Err(StreamsError::kafka(
                    format!(
                        "restoring from {topic}/{partition} did not reach offset {high} in time"
                    ),
                    KafkaError::PartitionEOF(partition),
                ));
            }
        }
        meter.finish_store();
        if let Some(last) = last {
            last_offsets.insert(topic.clone(), last);
        }
    }
    consumer
        .unassign()
        .map_err(|e| StreamsError::kafka("releasing the restore assignment", e))?;
    if !last_offsets.is_empty() {
        task.commit(|topic| last_offsets.get(topic).copied())?;
    }
    Ok(stats)
}
