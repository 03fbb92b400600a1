//! The call frame: what one task call (process a record, punctuate, flush,
//! initialize) shares between the processor nodes it runs, and the erased
//! node interface the frame dispatches to.
//!
//! Every task call builds one [`Frame`] on the stack
//! (`TaskInstance::frame`); nothing in it outlives the call. The frame holds
//! the task's node instances ([`NodeSlot`], each an [`ErasedNode`] in a
//! `RefCell`), its stores, the call's collector, the input record's
//! metadata, the clocks, and the schedule changes made during the call
//! ([`ScheduleOp`], applied by the task afterwards). The typed view a
//! processor sees is the `ProcessorContext` (`context.rs`); the adapters
//! from typed processors to [`ErasedNode`] are in `node.rs`.
//!
//! This module depends only on the leaf types of the processor layer
//! (records, collector, errors, punctuation timing, task id) and on the
//! store slots, so the context, the nodes, the task and the built topology
//! can all depend on it without a cycle.

use std::any::Any;
use std::cell::{Cell, RefCell};

use super::collector::RecordCollector;
use super::error::{KeyOrValue, ProcessorError};
use super::punctuation::{PunctuationType, ScheduleId, Timing};
use super::store::StoreSlot;
use super::task::{InputRecord, TaskId};

/// A node instance of a task.
pub(crate) struct NodeSlot {
    pub(crate) name: String,
    pub(crate) children: Vec<usize>,
    pub(crate) stores: Vec<usize>,
    pub(crate) runtime: RefCell<Box<dyn ErasedNode>>,
    pub(crate) stats: NodeStats,
}

/// What one node of a task did: records it took, and the time its calls
/// took (children included) for the records whose processing was timed.
#[derive(Default)]
pub(crate) struct NodeStats {
    pub(crate) records: Cell<u64>,
    pub(crate) timed_ns: Cell<u64>,
}

impl NodeStats {
    /// Counts one record; adds the call's time when it was timed.
    pub(crate) fn note(&self, started: Option<std::time::Instant>) {
        self.records.set(self.records.get() + 1);
        if let Some(started) = started {
            let ns = started.elapsed().as_nanos() as u64;
            self.timed_ns.set(self.timed_ns.get() + ns);
        }
    }
}

/// Pending changes to the task's schedules made during a call.
pub(crate) enum ScheduleOp {
    Add(Schedule),
    Cancel(ScheduleId),
}

pub(crate) type PunctuateFn =
    Box<dyn for<'f> FnMut(&'f Frame<'f>, usize, i64) -> Result<(), ProcessorError> + Send>;

/// One scheduled punctuator of one processor node.
pub(crate) struct Schedule {
    pub(crate) id: ScheduleId,
    pub(crate) node: usize,
    pub(crate) kind: PunctuationType,
    pub(crate) timing: Timing,
    pub(crate) callback: PunctuateFn,
}

/// Everything one task call shares between the nodes it runs.
pub(crate) struct Frame<'a> {
    pub(crate) task: TaskId,
    pub(crate) nodes: &'a [NodeSlot],
    pub(crate) stores: &'a [StoreSlot],
    pub(crate) collector: RefCell<&'a mut dyn RecordCollector>,
    /// The input record being processed; absent during punctuation and init.
    pub(crate) input: Option<&'a InputRecord<'a>>,
    pub(crate) current_timestamp: Cell<i64>,
    pub(crate) stream_time: Cell<i64>,
    pub(crate) wall_clock_ms: i64,
    pub(crate) schedule_ops: RefCell<Vec<ScheduleOp>>,
    pub(crate) next_schedule_id: &'a Cell<u64>,
    /// The innermost node whose processing failed, for error reports.
    pub(crate) failed_node: Cell<Option<usize>>,
    /// Set while processors run `init`: forwarding is refused then, because
    /// downstream processors may not be initialized yet.
    pub(crate) initializing: bool,
    /// Late records dropped during this call (added to the task's metrics).
    pub(crate) late_records: Cell<u64>,
    /// The instance's record cache budget.
    pub(crate) cache: &'a std::sync::Arc<crate::state::CacheBudget>,
    /// Whether this call's node processing is timed (one record in
    /// [`crate::processor::task::NODE_SAMPLE`]).
    pub(crate) timed: bool,
}

impl<'a> Frame<'a> {
    /// Runs node `node` on the record in `input` (an `Option<Record<K, V>>`).
    pub(crate) fn dispatch(
        &'a self,
        node: usize,
        input: &mut dyn Any,
    ) -> Result<(), ProcessorError> {
        if self.initializing {
            return Err(ProcessorError::ForwardDuringInit);
        }
        let slot = &self.nodes[node];
        let mut runtime = slot
            .runtime
            .try_borrow_mut()
            .expect("processor graph is acyclic, so a node is never re-entered");
        let started = self.timed.then(std::time::Instant::now);
        let result = runtime.process(self, node, input);
        slot.stats.note(started);
        if result.is_err() && self.failed_node.get().is_none() {
            self.failed_node.set(Some(node));
        }
        result
    }
}

/// Why a source node could not hand a record to its children.
pub(crate) enum SourceError {
    Deserialize {
        what: KeyOrValue,
        source: crate::serdes::SerdeError,
    },
    InvalidTimestamp(i64),
    Processing(ProcessorError),
}

/// A node of a task's processor graph with its types erased.
pub(crate) trait ErasedNode: Send {
    /// Called once before the first record.
    fn init<'a>(&mut self, frame: &'a Frame<'a>, node: usize) -> Result<(), ProcessorError> {
        let _ = (frame, node);
        Ok(())
    }

    /// Processes the `Option<Record<K, V>>` behind `input`.
    fn process<'a>(
        &mut self,
        frame: &'a Frame<'a>,
        node: usize,
        input: &mut dyn Any,
    ) -> Result<(), ProcessorError>;

    /// Source nodes only: decode an input record and forward it.
    fn process_input<'a>(
        &mut self,
        frame: &'a Frame<'a>,
        node: usize,
        input: &InputRecord<'_>,
    ) -> Result<(), SourceError> {
        let _ = input;
        Err(SourceError::Processing(ProcessorError::TypeMismatch {
            node: frame.nodes[node].name.clone(),
            expected: "a record from the processor graph (this node is not a source)",
        }))
    }

    /// Called before the task commits: forwards (and writes to its store)
    /// what the node held back in the record cache.
    fn flush<'a>(&mut self, frame: &'a Frame<'a>, node: usize) -> Result<(), ProcessorError> {
        let _ = (frame, node);
        Ok(())
    }

    /// Called when the task aborts: drops what the node held back.
    fn discard(&mut self) {}

    /// Called once when the task closes.
    fn close(&mut self) {}
}
