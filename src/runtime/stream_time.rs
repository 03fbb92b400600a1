//! Stream time across restarts and task moves: kept in the metadata of the
//! committed consumer offsets, as Kafka Streams keeps its partition time.
//!
//! A task's stream time (the largest record timestamp it processed) decides
//! which windows are closed and which records are late. If it restarted
//! from `-1` after a crash or a rebalance, a record that was late before the
//! restart could reopen a closed window, and an emit-final result could be
//! decided differently than an uninterrupted run would have.
//!
//! # Invariants
//!
//! * Every offset a stream thread commits for an input partition carries, as
//!   its metadata, the stream time of the partition's task at that commit
//!   (`weir:stream_time=<ms>`, see [`encode`]). Under exactly-once the
//!   offsets go to the broker with `send_offsets_to_transaction`, so the
//!   stream time is committed **in the same transaction** as the outputs and
//!   changelog writes it produced: it always matches the committed state and
//!   the committed position, and an aborted transaction leaves the previous
//!   value in place. Under at-least-once it is committed with the offsets,
//!   after the stores.
//! * A partition without a record since the last commit is not committed
//!   again; its metadata still holds the task's stream time then, which no
//!   record has moved since (stream time only moves on records).
//! * When a task is created (assignment, or rebuild after an abort), its
//!   stream time is the largest value found in the committed metadata of its
//!   input partitions ([`committed_stream_times`]), so it continues exactly
//!   where the last commit left it, on this instance or on another one.
//!   Metadata that is not Weir's (another client's, or empty) is ignored:
//!   the task starts at `-1` as before.

use std::collections::HashMap;

use rdkafka::TopicPartitionList;
use rdkafka::error::KafkaResult;

use super::StreamsError;
use super::topics::TopicLayout;
use crate::processor::TaskId;

/// The prefix of Weir's offset metadata.
const PREFIX: &str = "weir:stream_time=";

/// The offset metadata that records stream time `stream_time_ms`.
///
/// ```
/// use weir::runtime::stream_time::{decode, encode};
/// assert_eq!(encode(60_000), "weir:stream_time=60000");
/// assert_eq!(decode(&encode(60_000)), Some(60_000));
/// ```
pub fn encode(stream_time_ms: i64) -> String {
    format!("{PREFIX}{stream_time_ms}")
}

/// The stream time recorded in offset metadata `metadata`; `None` when the
/// metadata is not Weir's (empty, or written by another client).
pub fn decode(metadata: &str) -> Option<i64> {
    metadata.strip_prefix(PREFIX)?.parse().ok()
}

/// Reads the committed offsets of `assignment` and returns, per task, the
/// largest stream time their metadata records. Tasks without Weir metadata
/// are absent.
pub(crate) fn committed_stream_times(
    committed_offsets: impl FnOnce(TopicPartitionList) -> KafkaResult<TopicPartitionList>,
    assignment: &[(String, i32)],
    layout: &TopicLayout,
) -> Result<HashMap<TaskId, i64>, StreamsError> {
    let mut times = HashMap::new();
    if assignment.is_empty() {
        return Ok(times);
    }
    let mut tpl = TopicPartitionList::new();
    for (topic, partition) in assignment {
        tpl.add_partition(topic, *partition);
    }
    let committed = committed_offsets(tpl).map_err(|e| {
        StreamsError::kafka(
            "reading the committed offsets of the new assignment (their metadata holds each task's stream time)",
            e,
        )
    })?;
    for element in committed.elements() {
        let (Some(&subtopology), Some(time)) = (
            layout.subtopology_of_topic.get(element.topic()),
            decode(element.metadata()),
        ) else {
            continue;
        };
        let id = TaskId {
            subtopology,
            partition: element.partition(),
        };
        let entry = times.entry(id).or_insert(time);
        *entry = (*entry).max(time);
    }
    Ok(times)
}

/// Adds the stream time of each partition's task to `offsets` as metadata.
pub(crate) fn annotate(
    offsets: &mut TopicPartitionList,
    layout: &TopicLayout,
    stream_time: impl Fn(TaskId) -> Option<i64>,
) {
    let partitions: Vec<(String, i32)> = offsets
        .elements()
        .iter()
        .map(|e| (e.topic().to_owned(), e.partition()))
        .collect();
    for (topic, partition) in partitions {
        let Some(&subtopology) = layout.subtopology_of_topic.get(&topic) else {
            continue;
        };
        let time = stream_time(TaskId {
            subtopology,
            partition,
        });
        if let (Some(time), Some(mut element)) = (
            time.filter(|&t| t >= 0),
            offsets.find_partition(&topic, partition),
        ) {
            element.set_metadata(encode(time));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::Offset;

    #[test]
    fn metadata_round_trips_and_ignores_foreign_values() {
        assert_eq!(decode(&encode(0)), Some(0));
        assert_eq!(decode(&encode(1_700_000_000_123)), Some(1_700_000_000_123));
        assert_eq!(decode(""), None);
        // Kafka Streams' base64 partition-time metadata is not ours.
        assert_eq!(decode("AQAAAXyH1TqA"), None);
        assert_eq!(decode("weir:stream_time=abc"), None);
    }

    #[test]
    fn annotate_sets_the_task_stream_time_per_partition() {
        let layout = TopicLayout {
            subtopology_of_topic: [("in".to_string(), 0)].into_iter().collect(),
            ..TopicLayout::default()
        };
        let mut tpl = TopicPartitionList::new();
        for p in 0..3 {
            tpl.add_partition_offset("in", p, Offset::Offset(10))
                .unwrap();
        }
        tpl.add_partition_offset("other", 0, Offset::Offset(5))
            .unwrap();
        annotate(&mut tpl, &layout, |id| match id.partition {
            0 => Some(42),
            1 => Some(-1),
            _ => None,
        });
        let meta = |t: &str, p| tpl.find_partition(t, p).unwrap().metadata().to_owned();
        assert_eq!(decode(&meta("in", 0)), Some(42));
        assert_eq!(meta("in", 1), "", "no stream time yet: no metadata");
        assert_eq!(meta("in", 2), "");
        assert_eq!(meta("other", 0), "");
    }
}
