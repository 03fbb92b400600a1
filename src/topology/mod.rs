//! Topologies: the DSL that builds them and the data they are.
//!
//! A [`Topology`] is plain data produced by [`StreamsBuilder::build`]:
//!
//! * **nodes** — sources (topics → typed records), processors, sinks — with
//!   their edges, connected stores, and a *supplier* that makes one node
//!   instance per task;
//! * **stores** — name, kind, serdes, whether logged (the backend is chosen
//!   when a task is built, by its [`crate::processor::StoreProvider`]);
//! * **sub-topologies** — the connected components of the graph, where nodes
//!   sharing a store are connected and a repartition topic (a sink in one
//!   component, a source in another) separates components.
//!
//! A task ([`crate::processor::TaskInstance`]) is one sub-topology on one partition.
//!
//! # Repartitioning
//!
//! A key-changing operation (`map`, `flat_map`, `select_key`, `group_by`)
//! marks the stream as *repartition required*. When such a stream is grouped
//! and aggregated (or [`KStream::repartition`] is called) the builder inserts a
//! sink to the internal topic `<application_id>-<name>-repartition` and a new
//! source reading it, so all records of a key meet in one task. `<name>` is the
//! `Grouped` name, else the store name, else the generated store name.
//!
//! # Names
//!
//! Unnamed nodes and stores get Kafka Streams-style generated names
//! (`KSTREAM-FILTER-0000000003`): a prefix and a counter incremented by every
//! generated name in call order. The same builder code therefore yields the
//! same names on every run, which keeps store, changelog and repartition topic
//! names stable across deployments. Name a node with `.named("...")` before
//! the operation; name a store with [`Materialized::as_`].
//!
//! ```
//! use weir::topology::{Consumed, Materialized, Produced, StreamsBuilder};
//!
//! let builder = StreamsBuilder::new();
//! builder
//!     .stream::<(), String>("text", Consumed::new())
//!     .flat_map_values(|line: String| {
//!         line.split_whitespace().map(str::to_lowercase).collect::<Vec<_>>()
//!     })
//!     .group_by(|_, word: &String| word.clone(), Default::default())
//!     .count(Materialized::as_("counts"))
//!     .to_stream()
//!     .to("word-counts", Produced::new());
//! let topology = builder.build().unwrap();
//! assert_eq!(topology.subtopology_count(), 2);
//! ```

mod builder;
mod describe;
mod global;
mod global_store;
mod graph;
mod grouped;
mod internal;
mod join;
mod kstream;
mod ktable;
mod options;
mod split;
mod windowed;

pub use builder::StreamsBuilder;
pub use describe::{
    NodeDescription, NodeKindDescription, SubtopologyDescription, TopologyDescription,
};
pub use global::GlobalKTable;
pub use global_store::{GlobalStore, GlobalStores};
pub(crate) use graph::{
    NodeBuildContext, NodeDef, NodeFactory, NodeKind, StoreDef, SubtopologyDef,
};
pub use graph::{TopicName, Topology};
pub use grouped::KGroupedStream;
pub use join::{JoinWindows, Joined, ListSerde};
pub use kstream::KStream;
pub use ktable::KTable;
pub use options::{Consumed, Grouped, Materialized, Produced, Repartitioned};
pub use split::BranchedKStream;
pub use windowed::{SessionWindowedKStream, TimeWindowedKStream};

/// Marker for types that can flow through a topology: cloned when a record
/// is forwarded to several children.
pub trait Data: Clone + 'static {}
impl<T: Clone + 'static> Data for T {}

/// Chooses the partition of an output record (Kafka Streams' `StreamPartitioner`).
/// `None` leaves the choice to the producer's key hash.
pub trait StreamPartitioner<K, V>: Send + Sync + 'static {
    /// The partition in `0..num_partitions` for this record, or `None`.
    fn partition(&self, topic: &str, key: &K, value: &V, num_partitions: i32) -> Option<i32>;
}

impl<K, V, F> StreamPartitioner<K, V> for F
where
    F: Fn(&str, &K, &V, i32) -> Option<i32> + Send + Sync + 'static,
{
    fn partition(&self, topic: &str, key: &K, value: &V, num_partitions: i32) -> Option<i32> {
        self(topic, key, value, num_partitions)
    }
}

/// Why a topology could not be built. Raised by [`StreamsBuilder::build`].
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum TopologyError {
    /// No serde was given for a key or value and none is registered for its type.
    #[error(
        "{node}: no {what} serde for type {type_name}; pass one (Consumed/Produced/Grouped/Materialized) or register a default in the builder's SerdeRegistry"
    )]
    MissingSerde {
        /// The node or store needing it.
        node: String,
        /// "key" or "value".
        what: &'static str,
        /// The Rust type.
        type_name: &'static str,
    },
    /// A windowed aggregation was configured inconsistently.
    #[error("windowed aggregation '{store}': {source}")]
    Window {
        /// The aggregation's store.
        store: String,
        /// What is wrong.
        #[source]
        source: crate::windows::WindowError,
    },
    /// Two processors or two stores have the same name.
    #[error(
        "the name '{0}' is used twice; processor and store names must be unique within a topology"
    )]
    DuplicateName(String),
    /// A processor was connected to a store that was not added.
    #[error(
        "processor '{processor}' uses store '{store}', which was not added; call add_key_value_store first"
    )]
    UnknownStore {
        /// The processor.
        processor: String,
        /// The missing store.
        store: String,
    },
    /// A store added for the Processor API has no name.
    #[error("a store added with add_key_value_store needs a name: use Materialized::as_(\"name\")")]
    UnnamedStore,
    /// `split()` was not finished with `default_branch` or `no_default_branch`.
    #[error(
        "split node '{0}' was never finished; end the chain with default_branch(..) or no_default_branch()"
    )]
    UnfinishedSplit(String),
    /// The topology has no source.
    #[error("the topology has no source; add one with StreamsBuilder::stream or ::table")]
    Empty,
    /// A parameter of a shipped topology has a value it cannot use.
    #[error("config key 'topology.{name}' = '{value}': {requirement}")]
    InvalidParameter {
        /// The parameter.
        name: &'static str,
        /// The value given.
        value: String,
        /// What it must be.
        requirement: &'static str,
    },
}
