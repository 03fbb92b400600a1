//! The runtime: many instances of one application share the work through a
//! Kafka consumer group; tasks keep their state in stores backed by
//! changelog topics; results are exactly-once with Kafka transactions.
//!
//! * [`KafkaStreams`] (`app.rs`) — the application object and its states
//!   (`state.rs`);
//! * `topics.rs` — source topic checks and internal topic creation;
//! * `thread/` — a stream thread: consumer, producer, tasks (`mod.rs`), the
//!   poll → process → commit loop (`process.rs`), commit/abort and the task
//!   lifecycle (`lifecycle.rs`), the rebalance callbacks (`rebalance.rs`);
//! * `buffer.rs` — per-partition input buffers, timestamp order, pause/resume;
//! * `purge.rs` — deleting consumed repartition records;
//! * `standby.rs` — standby replicas;
//! * `restore.rs` — restoring stores from the changelog tail;
//! * `global.rs` — the global thread: loads and updates global tables;
//! * `collector.rs` — task output into the producer, changelog offsets from
//!   delivery reports;
//! * `stores.rs` — the state directory and the RocksDB stores of tasks;
//! * [`stream_time`] — each task's stream time, committed as offset metadata;
//! * `clients.rs` — librdkafka client settings;
//! * `end_of_partition.rs` — the context of consumers that read to the end
//!   of partitions (the end is logged at debug level, not as an error).

mod app;
mod buffer;
mod clients;
mod collector;
pub(crate) mod end_of_partition;
mod error;
mod global;
mod purge;
mod restore;
mod standby;
mod state;
mod stores;
pub mod stream_time;
mod thread;
pub mod topics;

pub use app::KafkaStreams;
pub use buffer::{BufferStats, BufferStatsSnapshot};
pub use error::StreamsError;
pub use restore::RestoreStats;
pub(crate) use state::StateCell;
pub use state::{AppState, StateListener};
