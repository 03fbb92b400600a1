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
//!   (`weir:stream_time=<ms>;committed_at=<wall-clock ms>`, see
//!   [`encode_at`]). Under exactly-once the
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
/// What follows the stream time: the commit's wall-clock time (ms).
const COMMITTED_AT: &str = ";committed_at=";

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

/// The offset metadata of a commit at wall-clock time `committed_at_ms`
/// that records stream time `stream_time_ms`.
///
/// ```
/// use weir::runtime::stream_time::{committed_at, decode, encode_at};
/// let metadata = encode_at(60_000, 1_700_000_000_000);
/// assert_eq!(decode(&metadata), Some(60_000));
/// assert_eq!(committed_at(&metadata), Some(1_700_000_000_000));
/// ```
pub fn encode_at(stream_time_ms: i64, committed_at_ms: i64) -> String {
    format!("{PREFIX}{stream_time_ms}{COMMITTED_AT}{committed_at_ms}")
}

/// The stream time recorded in offset metadata `metadata`; `None` when the
/// metadata is not Weir's (empty, or written by another client).
pub fn decode(metadata: &str) -> Option<i64> {
    let rest = metadata.strip_prefix(PREFIX)?;
    rest.split(';').next()?.parse().ok()
}

/// The wall-clock time (ms) of the commit that wrote `metadata`; `None`
/// for metadata without it (not Weir's, or written before it was kept).
pub fn committed_at(metadata: &str) -> Option<i64> {
    metadata
        .strip_prefix(PREFIX)?
        .split_once(COMMITTED_AT)?
        .1
        .parse()
        .ok()
}

/// What the committed offsets of an assignment say about its tasks.
#[derive(Debug, Default)]
pub(crate) struct Committed {
    /// Per task, the largest stream time of its partitions.
    pub(crate) stream_times: HashMap<TaskId, i64>,
    /// Per partition, when its last commit happened (wall clock, ms): the
    /// start of its current time without output.
    pub(crate) committed_at: HashMap<(String, i32), i64>,
    /// Per partition with a committed offset, that offset.
    pub(crate) offsets: HashMap<(String, i32), i64>,
}

/// Reads the committed offsets of `assignment` and returns, per task, the
/// largest stream time their metadata records, and per partition when it
/// was last committed. Tasks and partitions without Weir metadata are
/// absent.
pub(crate) fn committed_stream_times(
    committed_offsets: impl FnOnce(TopicPartitionList) -> KafkaResult<TopicPartitionList>,
    assignment: &[(String, i32)],
    layout: &TopicLayout,
) -> Result<Committed, StreamsError> {
    let mut found = Committed::default();
    if assignment.is_empty() {
        return Ok(found);
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
        if let rdkafka::Offset::Offset(offset) = element.offset() {
            found
                .offsets
                .insert((element.topic().to_string(), element.partition()), offset);
        }
        if let Some(at) = committed_at(element.metadata()) {
            found
                .committed_at
                .insert((element.topic().to_string(), element.partition()), at);
        }
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
        let entry = found.stream_times.entry(id).or_insert(time);
        *entry = (*entry).max(time);
    }
    Ok(found)
}

/// Adds the stream time of each partition's task, and the commit's
/// wall-clock time `now_ms`, to `offsets` as metadata.
pub(crate) fn annotate(
    offsets: &mut TopicPartitionList,
    layout: &TopicLayout,
    now_ms: i64,
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
            element.set_metadata(encode_at(time, now_ms));
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
        // Metadata with the commit time; older metadata has none.
        assert_eq!(decode(&encode_at(5, 9)), Some(5));
        assert_eq!(committed_at(&encode_at(5, 9)), Some(9));
        assert_eq!(committed_at(&encode(5)), None);
        assert_eq!(committed_at("AQAAAXyH1TqA"), None);
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
        annotate(&mut tpl, &layout, 77, |id| match id.partition {
            0 => Some(42),
            1 => Some(-1),
            _ => None,
        });
        let meta = |t: &str, p| tpl.find_partition(t, p).unwrap().metadata().to_owned();
        assert_eq!(decode(&meta("in", 0)), Some(42));
        assert_eq!(committed_at(&meta("in", 0)), Some(77));
        assert_eq!(meta("in", 1), "", "no stream time yet: no metadata");
        assert_eq!(meta("in", 2), "");
        assert_eq!(meta("other", 0), "");
    }
}
