//! The [`ProcessorContext`]: what a processor may do while it runs.
//!
//! A context is a typed view (`KOut`, `VOut` = what this processor forwards)
//! over the task's per-call *frame*: the graph of node instances, the task's
//! stores, the collector of the current call, the input record's metadata and
//! the task's clocks. Every task call (process one record, punctuate) builds one
//! frame on the stack (`frame.rs`); nothing in it outlives the call.
//!
//! # Invariants
//!
//! * Forwarding is depth-first and synchronous, as in Kafka Streams:
//!   `forward` returns after every descendant processed the record.
//! * The graph is a DAG, so a node is never re-entered while it runs; each
//!   node instance sits in its own `RefCell` and is borrowed only while it
//!   processes.
//! * Store handles borrow their store only for the duration of one operation,
//!   so a processor can hold a handle across `forward`.
//! * Forwarding to several children clones the record for all but the last.

use std::marker::PhantomData;
use std::time::Duration;

use super::error::ProcessorError;
use super::frame::{Frame, PunctuateFn, Schedule, ScheduleOp};
use super::punctuation::{PunctuationType, ScheduleId, Timing};
use super::record::{Record, RecordMetadata};
use super::store::StoreSlot;
use super::task::{InputRecord, TaskId};
use super::typed::KeyValueStoreHandle;
use super::windowed::{SessionStoreHandle, WindowStoreHandle};

/// Boxes a punctuator over the erased frame (pins the closure's signature).
fn erase_punctuator<F>(f: F) -> PunctuateFn
where
    F: for<'f> FnMut(&'f Frame<'f>, usize, i64) -> Result<(), ProcessorError> + Send + 'static,
{
    Box::new(f)
}

/// What a processor can do: forward records, use its stores, schedule
/// punctuators and read the current record's metadata and the clocks.
///
/// `KOut`/`VOut` are the key and value types this processor forwards.
pub struct ProcessorContext<'a, KOut = (), VOut = ()> {
    frame: &'a Frame<'a>,
    node: usize,
    _out: PhantomData<fn(KOut, VOut)>,
}

impl<'a, KOut, VOut> ProcessorContext<'a, KOut, VOut> {
    pub(crate) fn new(frame: &'a Frame<'a>, node: usize) -> Self {
        ProcessorContext {
            frame,
            node,
            _out: PhantomData,
        }
    }

    /// The instance's record cache budget, for a processor that caches the
    /// updates of `store`: `None` when caching is off or another processor
    /// also reads the store (it must see every update at once).
    pub(crate) fn cache_budget_for(
        &self,
        store: &str,
    ) -> Option<std::sync::Arc<crate::state::CacheBudget>> {
        if !self.frame.cache.enabled() {
            return None;
        }
        let index = self.frame.stores.iter().position(|s| s.name == store)?;
        let shared = self
            .frame
            .nodes
            .iter()
            .enumerate()
            .any(|(i, n)| i != self.node && n.stores.contains(&index));
        (!shared).then(|| self.frame.cache.clone())
    }

    /// Sets the timestamp the next store writes log with (a flush writes
    /// each held update with its own); returns the previous one.
    pub(crate) fn replace_timestamp(&self, timestamp: i64) -> i64 {
        self.frame.current_timestamp.replace(timestamp)
    }

    /// The name of the processor this context belongs to.
    pub fn processor_name(&self) -> &'a str {
        &self.frame.nodes[self.node].name
    }

    /// The task running this processor.
    pub fn task_id(&self) -> TaskId {
        self.frame.task
    }

    /// Topic, partition and offset of the input record being processed;
    /// `None` inside a punctuator.
    pub fn record_metadata(&self) -> Option<RecordMetadata<'a>> {
        self.frame.input.map(|input| RecordMetadata {
            topic: input.topic,
            partition: input.partition,
            offset: input.offset,
        })
    }

    /// The input record being processed, with its key and value bytes as
    /// read; `None` inside a punctuator.
    pub(crate) fn input(&self) -> Option<&'a InputRecord<'a>> {
        self.frame.input
    }

    /// The timestamp of the record being processed (inside a punctuator: the
    /// punctuation time).
    pub fn timestamp(&self) -> i64 {
        self.frame.current_timestamp.get()
    }

    /// The task's stream time: the largest record timestamp seen, or `-1`
    /// before the first record.
    pub fn stream_time(&self) -> i64 {
        self.frame.stream_time.get()
    }

    /// Wall-clock time in milliseconds as the task's caller reported it.
    pub fn wall_clock_time_ms(&self) -> i64 {
        self.frame.wall_clock_ms
    }

    fn store_slot(&self, name: &str) -> Result<&'a StoreSlot, ProcessorError> {
        let frame = self.frame;
        Ok(frame.nodes[self.node]
            .stores
            .iter()
            .map(|&i| &frame.stores[i])
            .find(|s| s.name == name)
            .ok_or_else(|| crate::state::StoreError::UnknownStore(name.to_owned()))?)
    }

    /// A typed handle to the key-value store `name`, which must be connected
    /// to this processor.
    pub fn key_value_store<K: 'static, V: 'static>(
        &self,
        name: &str,
    ) -> Result<KeyValueStoreHandle<'a, K, V>, ProcessorError> {
        KeyValueStoreHandle::new(self.frame, self.store_slot(name)?)
    }

    /// A typed handle to the window store `name`, which must be connected
    /// to this processor.
    pub fn window_store<K: 'static, V: 'static>(
        &self,
        name: &str,
    ) -> Result<WindowStoreHandle<'a, K, V>, ProcessorError> {
        WindowStoreHandle::new(self.frame, self.store_slot(name)?)
    }

    /// A typed handle to the session store `name`, which must be connected
    /// to this processor.
    pub fn session_store<K: 'static, V: 'static>(
        &self,
        name: &str,
    ) -> Result<SessionStoreHandle<'a, K, V>, ProcessorError> {
        SessionStoreHandle::new(self.frame, self.store_slot(name)?)
    }

    /// Counts one record dropped because it arrived after its window closed
    /// (it shows in [`super::TaskMetrics::late_dropped`]).
    pub fn record_late(&self) {
        self.frame
            .late_records
            .set(self.frame.late_records.get() + 1);
    }

    /// Sends already serialized bytes with `headers` straight to `topic` (the
    /// late-records topic of windowed aggregations), outside the processor
    /// graph, through the task's collector (so inside the open transaction).
    pub(crate) fn send_raw(
        &self,
        topic: &str,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &super::Headers,
    ) -> Result<(), ProcessorError> {
        self.frame
            .collector
            .borrow_mut()
            .send(super::collector::OutputRecord {
                topic,
                partition: None,
                key,
                value,
                timestamp: self.frame.current_timestamp.get(),
                headers,
                kind: super::collector::OutputKind::Sink,
            })?;
        Ok(())
    }

    /// Schedules `callback` every `interval` of stream time or wall-clock
    /// time; see [`super::punctuation`] for when it fires. Records the callback
    /// forwards go to this processor's children.
    pub fn schedule<F>(
        &self,
        interval: Duration,
        kind: PunctuationType,
        mut callback: F,
    ) -> ScheduleId
    where
        F: for<'c> FnMut(&ProcessorContext<'c, KOut, VOut>, i64) -> Result<(), ProcessorError>
            + Send
            + 'static,
        KOut: 'static,
        VOut: 'static,
    {
        let id = ScheduleId(self.frame.next_schedule_id.get());
        self.frame.next_schedule_id.set(id.0 + 1);
        let erased = erase_punctuator(move |frame, node, now| {
            let ctx = ProcessorContext::<KOut, VOut>::new(frame, node);
            callback(&ctx, now)
        });
        let interval_ms = i64::try_from(interval.as_millis()).unwrap_or(i64::MAX);
        self.frame
            .schedule_ops
            .borrow_mut()
            .push(ScheduleOp::Add(Schedule {
                id,
                node: self.node,
                kind,
                timing: Timing::new(kind, interval_ms, self.frame.wall_clock_ms),
                callback: erased,
            }));
        id
    }

    /// Cancels a schedule made by this task.
    pub fn cancel(&self, id: ScheduleId) {
        self.frame
            .schedule_ops
            .borrow_mut()
            .push(ScheduleOp::Cancel(id));
    }

    /// Names of this processor's children, in the order they were connected.
    pub fn child_names(&self) -> Vec<&'a str> {
        let frame = self.frame;
        frame.nodes[self.node]
            .children
            .iter()
            .map(|&c| frame.nodes[c].name.as_str())
            .collect()
    }
}

impl<KOut: Clone + 'static, VOut: Clone + 'static> ProcessorContext<'_, KOut, VOut> {
    /// Sends `record` to every child of this processor (depth-first; returns
    /// when all descendants are done).
    pub fn forward(&self, record: Record<KOut, VOut>) -> Result<(), ProcessorError> {
        let children = &self.frame.nodes[self.node].children;
        let Some((&last, rest)) = children.split_last() else {
            return Ok(());
        };
        for &child in rest {
            let mut slot = Some(record.clone());
            self.frame.dispatch(child, &mut slot)?;
        }
        let mut slot = Some(record);
        self.frame.dispatch(last, &mut slot)
    }

    /// Sends `record` only to the child named `child`.
    pub fn forward_to(
        &self,
        child: &str,
        record: Record<KOut, VOut>,
    ) -> Result<(), ProcessorError> {
        let frame = self.frame;
        let node = &frame.nodes[self.node];
        let Some(&target) = node
            .children
            .iter()
            .find(|&&c| frame.nodes[c].name == child)
        else {
            return Err(ProcessorError::UnknownChild {
                node: node.name.clone(),
                child: child.to_owned(),
                children: self.child_names().into_iter().map(str::to_owned).collect(),
            });
        };
        let mut slot = Some(record);
        frame.dispatch(target, &mut slot)
    }

    /// Forwards to the child at `index` (in connection order); used by
    /// `split`, which resolves branch names to indices once.
    pub(crate) fn forward_to_index(
        &self,
        index: usize,
        record: Record<KOut, VOut>,
    ) -> Result<(), ProcessorError> {
        let target = self.frame.nodes[self.node].children[index];
        let mut slot = Some(record);
        self.frame.dispatch(target, &mut slot)
    }
}
