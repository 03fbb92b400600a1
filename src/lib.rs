//! Weir: Kafka Streams for Rust.
//!
//! A Kafka-native stream processing library and runtime. An application is a
//! topology of processors; instances share the work through a Kafka consumer
//! group, keep local state in RocksDB backed by compacted changelog topics,
//! and commit results exactly-once with Kafka transactions.
//!
//! See `ARCHITECTURE.md` for how a record travels through the system.
//!
//! # What the library exposes
//!
//! * Building an application: [`topology`] (the DSL and the Processor API
//!   wiring), [`processor`] (processors, records, punctuation), [`serdes`],
//!   [`state`] (stores), [`windows`], [`time`] (timestamp extractors),
//!   [`handler`] (error handlers).
//! * Running it: [`config`] ([`StreamsConfig`](config::StreamsConfig)),
//!   [`runtime`] ([`KafkaStreams`](runtime::KafkaStreams)), [`metrics`],
//!   [`http`], [`telemetry`] (logging set-up), [`reset`] (starting an
//!   application over).
//! * Testing it: [`driver`] (the in-memory `TopologyTestDriver`) and, with
//!   the cargo feature `testing`, `testing` (a real broker: a
//!   testcontainers Kafka or `KAFKA_BOOTSTRAP_SERVERS`, topic creation,
//!   producing, `read_committed` reading).
//! * [`topologies`]: the applications that ship with the `weir` binary
//!   (`word-count`, `events-by-type`, `page-views`, `order-enrichment`),
//!   public as worked examples of the API and so Weir's tests and
//!   benchmark harness can build them; their parameters and sample
//!   generators serve the binary, not general use.
//!
//! The `weir` binary's own helpers (creating topics, writing sample input,
//! printing a topic as a table) live in the binary (`src/cli/`) and are not
//! part of the library.

#![warn(missing_docs)]

pub mod config;
pub mod driver;
pub mod handler;
pub mod http;
pub mod metrics;
pub mod processor;
pub mod reset;
pub mod runtime;
pub mod serdes;
pub mod state;
pub mod telemetry;
#[cfg(feature = "testing")]
pub mod testing;
pub mod time;
#[path = "../topologies/mod.rs"]
pub mod topologies;
pub mod topology;
pub mod windows;
