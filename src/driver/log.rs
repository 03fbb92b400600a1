//! The driver's in-memory topics: one append-only log per topic, the
//! [`RecordCollector`] every task writes to, and the queue of records to feed
//! back to the tasks that read them (see the module docs of `driver`).

use std::collections::{HashMap, VecDeque};

use crate::processor::{CollectorError, OutputRecord, RecordCollector};

use super::ProducedRecord;

/// In-memory topics: the driver's [`RecordCollector`].
#[derive(Default)]
pub(super) struct Topics {
    pub(super) logs: HashMap<String, TopicLog>,
    pub(super) partition_counts: HashMap<String, i32>,
    /// Topics some task reads: records sent there are fed back.
    pub(super) sources: HashMap<String, usize>,
    pub(super) feedback: VecDeque<(String, usize)>,
}

#[derive(Default)]
pub(super) struct TopicLog {
    pub(super) records: Vec<ProducedRecord>,
    pub(super) read: usize,
}

impl RecordCollector for Topics {
    fn send(&mut self, r: OutputRecord<'_>) -> Result<(), CollectorError> {
        let log = self.logs.entry(r.topic.to_owned()).or_default();
        let offset = log.records.len();
        log.records.push(ProducedRecord {
            topic: r.topic.to_owned(),
            partition: r.partition,
            offset: offset as i64,
            key: r.key.map(<[u8]>::to_vec),
            value: r.value.map(<[u8]>::to_vec),
            timestamp: r.timestamp,
            headers: r.headers.clone(),
            kind: r.kind,
        });
        if self.sources.contains_key(r.topic) {
            self.feedback.push_back((r.topic.to_owned(), offset));
        }
        Ok(())
    }

    fn partition_count(&self, topic: &str) -> Option<i32> {
        Some(self.partition_counts.get(topic).copied().unwrap_or(1))
    }
}

impl Topics {
    pub(super) fn last_offset(&self, topic: &str) -> Option<i64> {
        self.logs
            .get(topic)
            .and_then(|l| l.records.len().checked_sub(1))
            .map(|o| o as i64)
    }
}
