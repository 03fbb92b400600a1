//! The Processor API and the task: how a topology runs.
//!
//! * [`Processor`] — the lifecycle trait of one node (`init`, `process`,
//!   `close`), implemented by user processors and by every DSL operator.
//! * [`ProcessorContext`] — what a processor may do: `forward`, stores
//!   ([`KeyValueStoreHandle`], [`WindowStoreHandle`], [`SessionStoreHandle`]),
//!   `schedule`, record metadata, `record_late`.
//! * [`TaskInstance`] — one (sub-topology, partition) of a [`crate::topology::Topology`]
//!   built with a [`StoreProvider`]; the single code path through which the
//!   runtime and the test driver process records, punctuate and commit.
//! * [`RecordCollector`] — where everything a task emits goes.
//!
//! See `node` (private) for the type-erasure scheme of the graph.
//!
//! ```
//! use weir::processor::{Processor, ProcessorContext, ProcessorError, Record};
//!
//! /// Forwards each value's length.
//! struct Lengths;
//! impl Processor<String, String, String, usize> for Lengths {
//!     fn process(
//!         &mut self,
//!         ctx: &ProcessorContext<'_, String, usize>,
//!         record: Record<String, String>,
//!     ) -> Result<(), ProcessorError> {
//!         let len = record.value.len();
//!         ctx.forward(record.with_value(len))
//!     }
//! }
//! ```

pub(crate) mod aggregate;
mod collector;
mod context;
mod error;
mod frame;
pub(crate) mod node;
pub mod punctuation;
mod record;
mod store;
pub mod task;
mod typed;
mod windowed;

pub use collector::{CollectorError, OutputKind, OutputRecord, RecordCollector};
pub use context::ProcessorContext;
pub use error::{KeyOrValue, ProcessorError, TaskError};
pub use punctuation::{PunctuationType, ScheduleId};
pub use record::{Change, Header, Headers, Record, RecordMetadata};
pub use store::{Retention, StoreKind, StoreProvider, StoreSpec};
pub use task::{
    InputRecord, NodeMetrics, TaskConfig, TaskId, TaskInstance, TaskMetrics, TaskState,
};
pub use typed::KeyValueStoreHandle;
pub use windowed::{SessionStoreHandle, WindowStoreHandle};

pub(crate) use node::ProcessorNode;
pub(crate) use store::StoreSerdes;

/// A node of the processor graph (Kafka Streams' `Processor<KIn, VIn, KOut, VOut>`).
///
/// Lifecycle: `init` once (after the task's stores are restored) → `process`
/// per record (and scheduled punctuators) → `close` once. A processor instance
/// belongs to exactly one task; the topology holds a *supplier* that makes one
/// per task.
pub trait Processor<KIn, VIn, KOut = (), VOut = ()>: Send + 'static {
    /// Prepares the processor: look up stores, schedule punctuators.
    fn init(&mut self, ctx: &ProcessorContext<'_, KOut, VOut>) -> Result<(), ProcessorError> {
        let _ = ctx;
        Ok(())
    }

    /// Handles one record; forward results through `ctx`.
    fn process(
        &mut self,
        ctx: &ProcessorContext<'_, KOut, VOut>,
        record: Record<KIn, VIn>,
    ) -> Result<(), ProcessorError>;

    /// Releases resources when the task closes.
    fn close(&mut self) {}
}
