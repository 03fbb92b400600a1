//! [`MemoryChangelog`]: changelog records from the test driver's in-memory
//! topic logs, read through the same reader as the broker's.

use std::time::Duration;

use super::{ChangelogBatch, ChangelogSource};
use crate::driver::ProducedRecord;
use crate::processor::{TaskError, TaskInstance};
use crate::runtime::StreamsError;
use crate::runtime::restore::{RestoreStats, restore_stores};
use crate::state::StoreError;

/// Reads topic logs kept in memory, one partition per topic as in the test
/// driver: `log_of(topic)` is the topic's records in offset order (offsets
/// may have gaps; a log whose first offset is above 0 was truncated). The
/// partition number is not looked at. Never waits: a poll delivers what the
/// logs hold and reports the end of each assigned log once it is reached.
pub(crate) struct MemoryChangelog<F> {
    log_of: F,
    /// Per assigned part: topic, next offset, end reported since the last
    /// record.
    cursors: Vec<(String, i64, bool)>,
}

impl<'a, F: Fn(&str) -> &'a [ProducedRecord]> MemoryChangelog<F> {
    /// A source over the logs `log_of` returns.
    pub(crate) fn new(log_of: F) -> Self {
        MemoryChangelog {
            log_of,
            cursors: Vec::new(),
        }
    }
}

impl<'a, F: Fn(&str) -> &'a [ProducedRecord]> ChangelogSource for MemoryChangelog<F> {
    fn watermarks(
        &mut self,
        topic: &str,
        _partition: i32,
        _timeout: Duration,
    ) -> Result<(i64, i64), StreamsError> {
        let log = (self.log_of)(topic);
        let high = log.last().map_or(0, |r| r.offset + 1);
        let low = log.first().map_or(high, |r| r.offset);
        Ok((low, high))
    }

    fn assign(&mut self, from: &[(&str, i32, i64)]) -> Result<(), StreamsError> {
        self.cursors = from
            .iter()
            .map(|&(topic, _, offset)| (topic.to_string(), offset, false))
            .collect();
        Ok(())
    }

    fn poll(&mut self, _wait: Duration, batch: &mut ChangelogBatch) -> Result<(), StreamsError> {
        for (part, (topic, next, end_reported)) in self.cursors.iter_mut().enumerate() {
            let log = (self.log_of)(topic);
            let mut at = log.partition_point(|r| r.offset < *next);
            while at < log.len() && !batch.is_full() {
                let r = &log[at];
                batch.push(part, r.offset, r.key.as_deref(), r.value.as_deref());
                *next = r.offset + 1;
                *end_reported = false;
                at += 1;
            }
            if at == log.len() && !*end_reported {
                batch.push_end(part);
                *end_reported = true;
            }
        }
        Ok(())
    }
}

/// Restores every logged store of `task` (still `Created`) from the logs
/// `log_of` returns: the test driver's restart.
pub(crate) fn restore_in_memory<'a>(
    task: &mut TaskInstance,
    log_of: impl Fn(&str) -> &'a [ProducedRecord],
) -> Result<RestoreStats, TaskError> {
    let id = task.id();
    restore_stores(task, MemoryChangelog::new(log_of), Duration::MAX, None).map_err(|e| match e {
        StreamsError::Task(e) => e,
        StreamsError::Store(source) => TaskError::Store { task: id, source },
        // The in-memory source neither fails nor waits; kept as a store
        // error rather than a panic.
        other => TaskError::Store {
            task: id,
            source: StoreError::InvalidState {
                store: String::new(),
                message: other.to_string(),
            },
        },
    })
}
