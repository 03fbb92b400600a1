//! The runtime: many instances of one application share the work through a
//! Kafka consumer group; tasks keep their state in stores backed by
//! changelog topics; results are exactly-once with Kafka transactions.
//!
//! * [`KafkaStreams`] (`app.rs`) — the application object and its states
//!   (`state.rs`);
//! * `topics.rs` — source topic checks and internal topic creation;
//! * `thread/` — a stream thread as roles: the thread's state machine and
//!   error handling (`mod.rs`), the loop's phases (`phases.rs`), the streams
//!   producer (`producer.rs`), the task manager (`tasks.rs`), the commit
//!   protocol (`commit.rs`), opening tasks (`creator.rs`), the rebalance
//!   callbacks (`rebalance.rs`);
//! * `env.rs` — what the threads of an instance share;
//! * `error.rs` — [`StreamsError`] and its [`Recovery`] classes;
//! * `buffer.rs` — per-partition input buffers, timestamp order, pause/resume;
//! * `purge.rs` — deleting consumed repartition records;
//! * `query.rs` — interactive queries: reading stores through the stream
//!   threads ([`KeyValueQuery`]), `query_read.rs` — one read of a task's
//!   store (active or standby); `query_text.rs` — the same over HTTP
//!   (`/stores`), keys from URL text, values as JSON; `query_route.rs` —
//!   which instance runs a task, from the group description;
//! * `changelog/` — the changelog reader: from a store's committed offset
//!   to the end of its changelog partition, into `restore_batch`;
//! * `standby.rs` — standby replicas (follow changelogs with the reader);
//! * `restore.rs` — restoring an active task's stores with the reader;
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
pub(crate) mod changelog;
mod client_log;
mod clients;
mod collector;
pub(crate) mod end_of_partition;
mod env;
mod error;
mod global;
pub(crate) mod group_describe;
mod group_protocol;
mod purge;
mod query;
mod query_read;
mod query_route;
mod query_text;
mod restore;
mod standby;
mod state;
mod stores;
pub mod stream_time;
mod thread;
pub mod topics;
mod warm;

pub use app::KafkaStreams;
pub use buffer::{BufferStats, BufferStatsSnapshot};
pub use collector::flush as flush_producer;
pub use end_of_partition::EndOfPartitionContext;
pub use error::{Recovery, StreamsError};
pub(crate) use query::QueryBus;
pub(crate) use query::QueryParts;
pub use query::{KeyMetadata, KeyValueQuery, QueryError, SessionQuery, Stale, WindowQuery};
pub use query_route::InstanceInfo;
pub(crate) use query_route::Router;
pub(crate) use query_text::{Answer as StoreAnswer, StoreService};
pub use query_text::{query_application, query_path};
pub use restore::RestoreStats;
pub(crate) use state::StateCell;
pub use state::{AppState, StateListener};
