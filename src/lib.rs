//! Weir: Kafka Streams for Rust.
//!
//! A Kafka-native stream processing library and runtime. An application is a
//! topology of processors; instances share the work through a Kafka consumer
//! group, keep local state in RocksDB backed by compacted changelog topics,
//! and commit results exactly-once with Kafka transactions.
//!
//! See `ARCHITECTURE.md` for how a record travels through the system.

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
pub mod time;
pub mod tools;
#[path = "../topologies/mod.rs"]
pub mod topologies;
pub mod topology;
pub mod windows;
