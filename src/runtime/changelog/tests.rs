//! The reader against in-memory changelogs: where reading starts, what is
//! applied and committed, when it ends, and a task restored through it.

use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::Arc;

use super::*;
use crate::driver::ProducedRecord;
use crate::processor::{Headers, OutputKind, StoreSpec, TaskConfig};
use crate::state::{InMemoryKeyValueStore, KeyValueStore, StoreError};
use crate::topology::{Consumed, Grouped, Materialized, Produced, StreamsBuilder, Topology};

const TOPIC: &str = "app-counts-changelog";
pub(crate) const TASK: TaskId = TaskId {
    subtopology: 1,
    partition: 0,
};

/// A changelog record at `offset` with key `k<offset>`.
fn record(offset: i64) -> ProducedRecord {
    ProducedRecord {
        topic: TOPIC.to_string(),
        partition: Some(0),
        offset,
        key: Some(format!("k{offset}").into_bytes()),
        value: Some(offset.to_be_bytes().to_vec()),
        timestamp: 0,
        headers: Headers::new(),
        kind: OutputKind::Changelog,
    }
}

fn log(offsets: std::ops::Range<i64>) -> Vec<ProducedRecord> {
    offsets.map(record).collect()
}

/// What the reader did to its target.
#[derive(Default)]
struct Recorder {
    /// Keys applied, in order.
    keys: Vec<String>,
    /// `(records, last offset)` of every `restore_batch`.
    batches: Vec<(usize, i64)>,
    /// Offsets stores committed with.
    commits: Vec<i64>,
}

impl RestoreTarget for Recorder {
    fn restore_batch(
        &mut self,
        from: &ChangelogPartition,
        records: &[ChangelogRecord<'_>],
        last_offset: i64,
    ) -> Result<(), StreamsError> {
        assert_eq!((from.task, from.topic.as_str()), (TASK, TOPIC));
        self.keys.extend(
            records
                .iter()
                .map(|r| String::from_utf8(r.key.to_vec()).unwrap()),
        );
        self.batches.push((records.len(), last_offset));
        Ok(())
    }

    fn commit(&mut self, _: &ChangelogPartition, last_offset: i64) -> Result<(), StreamsError> {
        self.commits.push(last_offset);
        Ok(())
    }
}

fn keys(offsets: std::ops::Range<i64>) -> Vec<String> {
    offsets.map(|o| format!("k{o}")).collect()
}

/// Registers the test changelog at `committed` and reads it to the end.
fn restore(
    log: &[ProducedRecord],
    committed: Option<i64>,
    target: &mut Recorder,
) -> Result<(Registration, u64), StreamsError> {
    let mut reader = ChangelogReader::new(MemoryChangelog::new(|_: &str| log), ReadMode::ToEnd);
    let found = reader.register(TASK, "counts", (TOPIC, 0), committed, Duration::MAX)?;
    let applied = reader.read_to_end(target, Duration::from_secs(10), |_| {})?;
    Ok((found, applied))
}

#[test]
fn reading_starts_after_the_committed_offset() {
    let log = log(0..10);
    let mut target = Recorder::default();
    let (found, applied) = restore(&log, Some(3), &mut target).unwrap();
    assert_eq!(found.plan, Plan::ReadFrom(4));
    assert_eq!(applied, 6);
    assert_eq!(target.keys, keys(4..10));
    assert_eq!(target.batches, vec![(6, 9)], "one restore_batch");
    assert_eq!(target.commits, vec![9], "committed with the last offset");
}

#[test]
fn a_new_store_reads_the_whole_log() {
    let log = log(0..10);
    let mut target = Recorder::default();
    let (found, _) = restore(&log, None, &mut target).unwrap();
    assert_eq!(
        (found.plan, found.low, found.high),
        (Plan::ReadFrom(0), 0, 10)
    );
    assert_eq!(target.keys, keys(0..10));
}

#[test]
fn reading_starts_at_the_log_start_when_the_committed_records_were_deleted() {
    let log = log(5..10); // offsets 0..5 deleted (retention, DeleteRecords)
    let mut target = Recorder::default();
    let (found, _) = restore(&log, Some(1), &mut target).unwrap();
    assert_eq!((found.plan, found.low), (Plan::ReadFrom(5), 5));
    assert_eq!(target.keys, keys(5..10));
}

#[test]
fn a_store_at_the_end_reads_nothing() {
    let log = log(0..10);
    let mut target = Recorder::default();
    let (found, applied) = restore(&log, Some(9), &mut target).unwrap();
    assert_eq!((found.plan, applied), (Plan::UpToDate, 0));
    assert!(target.commits.is_empty());
}

#[test]
fn a_store_ahead_of_its_changelog_is_reported_and_not_read() {
    let log = log(0..5);
    for committed in [5, 7] {
        let mut target = Recorder::default();
        let (found, applied) = restore(&log, Some(committed), &mut target).unwrap();
        assert_eq!(found.plan, Plan::AheadOfLog { committed, high: 5 });
        assert_eq!(applied, 0);
    }
    assert_eq!(
        Plan::new(Some(0), 0, 0),
        Plan::AheadOfLog {
            committed: 0,
            high: 0
        },
        "an emptied (recreated) changelog"
    );
}

#[test]
fn stores_commit_every_n_records_with_the_last_offset() {
    let log = log(0..10);
    let mut target = Recorder::default();
    let mut reader =
        ChangelogReader::new(MemoryChangelog::new(|_: &str| &log[..]), ReadMode::ToEnd)
            .with_cadence(4, 2);
    reader
        .register(TASK, "counts", (TOPIC, 0), None, Duration::MAX)
        .unwrap();
    let mut progress = Vec::new();
    reader
        .read_to_end(&mut target, Duration::from_secs(10), |n| progress.push(n))
        .unwrap();
    assert_eq!(
        target.batches,
        vec![(2, 1), (2, 3), (2, 5), (2, 7), (2, 9)],
        "batches of at most 2 records"
    );
    assert_eq!(
        target.commits,
        vec![3, 7, 9],
        "every 4 records, and at the end"
    );
    assert_eq!(progress.iter().sum::<u64>(), 10);
}

/// A source with given watermarks whose polls deliver scripted events.
struct Scripted {
    watermarks: (i64, i64),
    /// Per poll: records (by offset) and `None` for the end.
    polls: VecDeque<Vec<Option<i64>>>,
}

impl ChangelogSource for Scripted {
    fn watermarks(&mut self, _: &str, _: i32, _: Duration) -> Result<(i64, i64), StreamsError> {
        Ok(self.watermarks)
    }

    fn assign(&mut self, _: &[(&str, i32, i64)]) -> Result<(), StreamsError> {
        Ok(())
    }

    fn poll(&mut self, wait: Duration, batch: &mut ChangelogBatch) -> Result<(), StreamsError> {
        match self.polls.pop_front() {
            Some(events) => {
                for event in events {
                    match event {
                        Some(offset) => {
                            let r = record(offset);
                            batch.push(0, offset, r.key.as_deref(), r.value.as_deref());
                        }
                        None => batch.push_end(0),
                    }
                }
            }
            None => std::thread::sleep(wait),
        }
        Ok(())
    }
}

#[test]
fn the_end_of_a_partition_finishes_a_restore_before_trailing_transaction_markers() {
    // Offsets 10 and 11 are commit markers, never delivered.
    let source = Scripted {
        watermarks: (0, 12),
        polls: VecDeque::from([(0..10).map(Some).collect(), vec![None]]),
    };
    let mut reader = ChangelogReader::new(source, ReadMode::ToEnd);
    reader
        .register(TASK, "counts", (TOPIC, 0), None, Duration::MAX)
        .unwrap();
    let mut target = Recorder::default();
    let applied = reader
        .read_to_end(&mut target, Duration::from_secs(10), |_| {})
        .unwrap();
    assert_eq!(applied, 10);
    assert_eq!(target.commits, vec![9]);
}

#[test]
fn a_restore_that_does_not_reach_the_end_times_out() {
    let source = Scripted {
        watermarks: (0, 10),
        polls: VecDeque::from([(0..4).map(Some).collect()]),
    };
    let mut reader = ChangelogReader::new(source, ReadMode::ToEnd);
    reader
        .register(TASK, "counts", (TOPIC, 0), None, Duration::MAX)
        .unwrap();
    let mut target = Recorder::default();
    let timeout = Duration::from_millis(50);
    match reader.read_to_end(&mut target, timeout, |_| {}) {
        Err(StreamsError::Timeout { context, after }) => {
            assert_eq!(after, timeout);
            assert!(
                context.contains("store 'counts' of task 1_0")
                    && context.contains("offset 4 of 10"),
                "{context}"
            );
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert_eq!(target.keys, keys(0..4), "what arrived was applied");
}

/// The first `visible` records of `log`, as a log that grows.
fn growing<'a>(
    log: &'a [ProducedRecord],
    visible: &'a Cell<usize>,
) -> MemoryChangelog<impl Fn(&str) -> &'a [ProducedRecord] + 'a> {
    MemoryChangelog::new(move |_: &str| &log[..visible.get()])
}

#[test]
fn a_restore_stops_at_the_end_seen_at_registration_and_following_does_not() {
    let log = log(0..10);
    let visible = Cell::new(6);

    let mut to_end = ChangelogReader::new(growing(&log, &visible), ReadMode::ToEnd);
    to_end
        .register(TASK, "counts", (TOPIC, 0), None, Duration::MAX)
        .unwrap();
    visible.set(10); // appended after the watermarks were read
    let mut target = Recorder::default();
    to_end
        .read_to_end(&mut target, Duration::from_secs(10), |_| {})
        .unwrap();
    assert_eq!(target.keys, keys(0..6));

    let mut follow = ChangelogReader::new(growing(&log, &visible), ReadMode::Follow);
    visible.set(6);
    let found = follow
        .register(TASK, "counts", (TOPIC, 0), Some(2), Duration::MAX)
        .unwrap();
    assert_eq!(found.plan, Plan::ReadFrom(3));
    follow.start().unwrap();
    let mut target = Recorder::default();
    follow.fetch(Duration::ZERO).unwrap();
    assert_eq!(follow.apply(&mut target).unwrap(), 3);
    assert!(!follow.is_done(), "following is never done");
    visible.set(10);
    follow.fetch(Duration::ZERO).unwrap();
    assert_eq!(follow.apply(&mut target).unwrap(), 4);
    assert_eq!(target.keys, keys(3..10));
    assert!(target.commits.is_empty(), "fewer records than the cadence");
    follow.commit(&mut target).unwrap();
    assert_eq!(target.commits, vec![9]);
}

#[test]
fn an_up_to_date_store_is_followed_from_the_end() {
    let log = log(0..4);
    let visible = Cell::new(2);
    let mut follow = ChangelogReader::new(growing(&log, &visible), ReadMode::Follow);
    let found = follow
        .register(TASK, "counts", (TOPIC, 0), Some(1), Duration::MAX)
        .unwrap();
    assert_eq!(found.plan, Plan::UpToDate);
    follow.start().unwrap();
    visible.set(4);
    let mut target = Recorder::default();
    follow.fetch(Duration::ZERO).unwrap();
    follow.apply(&mut target).unwrap();
    assert_eq!(target.keys, keys(2..4));
}

/// Word count: sub-topology 1 counts into the logged store `counts`.
pub(crate) fn word_count() -> Topology {
    let builder = StreamsBuilder::new();
    builder
        .stream::<(), String>("lines", Consumed::new())
        .flat_map_values(|l: String| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
        .group_by(|_, w: &String| w.clone(), Grouped::new())
        .count(Materialized::as_("counts"))
        .to_stream()
        .to("counts-out", Produced::new());
    builder.build().unwrap()
}

/// Task `id` of `topology` with `config`, over fresh in-memory stores.
pub(crate) fn memory_task(topology: Arc<Topology>, id: TaskId, config: TaskConfig) -> TaskInstance {
    let mut provider =
        |_: TaskId, spec: &StoreSpec<'_>| -> Result<Box<dyn KeyValueStore>, StoreError> {
            Ok(Box::new(InMemoryKeyValueStore::new(spec.name)))
        };
    TaskInstance::new(topology, id, config, &mut provider).unwrap()
}

/// Task [`TASK`] of [`word_count`].
pub(crate) fn word_count_task() -> TaskInstance {
    memory_task(Arc::new(word_count()), TASK, TaskConfig::new("app"))
}

pub(crate) fn count(task: &TaskInstance, word: &str) -> Option<i64> {
    let value = task
        .read_store("counts", |s| s.get(word.as_bytes()).unwrap())
        .unwrap()?;
    Some(i64::from_be_bytes(value.try_into().unwrap()))
}

pub(crate) fn count_record(offset: i64, word: &str, count: Option<i64>) -> ProducedRecord {
    ProducedRecord {
        key: Some(word.as_bytes().to_vec()),
        value: count.map(|c| c.to_be_bytes().to_vec()),
        ..record(offset)
    }
}

#[test]
fn a_task_restores_its_store_from_the_committed_offset() {
    let log = [
        count_record(0, "a", Some(1)),
        count_record(1, "b", Some(1)),
        count_record(2, "a", Some(2)),
        count_record(3, "b", None),
        count_record(4, "c", Some(7)),
    ];
    let mut task = word_count_task();
    let stats = restore_in_memory(&mut task, |_: &str| &log[..3]).unwrap();
    assert_eq!((stats.restored, stats.changelog_size), (3, 3));
    assert_eq!(task.store_committed_offset("counts"), Some(2));
    assert_eq!((count(&task, "a"), count(&task, "b")), (Some(2), Some(1)));

    // The tail only: the tombstone and the new key.
    let stats = restore_in_memory(&mut task, |_: &str| &log[..]).unwrap();
    assert_eq!((stats.restored, stats.changelog_size), (2, 5));
    assert_eq!(task.store_committed_offset("counts"), Some(4));
    assert_eq!(
        (count(&task, "a"), count(&task, "b"), count(&task, "c")),
        (Some(2), None, Some(7))
    );
}

#[test]
fn a_task_ahead_of_its_changelog_fails_to_restore() {
    let log = log(0..3);
    let mut task = word_count_task();
    restore_in_memory(&mut task, |_: &str| &log[..]).unwrap();
    let err = restore_in_memory(&mut task, |_: &str| &log[..1]).unwrap_err();
    assert!(
        matches!(
            &err,
            crate::processor::TaskError::Store {
                source: StoreError::Corrupt { store, .. },
                ..
            } if store == "counts"
        ),
        "{err}"
    );
}
