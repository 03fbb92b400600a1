//! Joins: stream–table, table–table and windowed stream–stream.
//!
//! Every join here is *co-partitioned*: both sides are read by the same task,
//! so a key's records from both sides meet in one place. The builder makes
//! that true the Kafka Streams way:
//!
//! * the join node is connected to the stores of both sides, which puts both
//!   sides into one sub-topology (see [`super`]); the runtime then checks at
//!   start-up that the sub-topology's source topics have equal partition
//!   counts and refuses to start otherwise;
//! * a stream side whose key was changed upstream (`map`, `select_key`, …) is
//!   first sent through a repartition topic `<name>-repartition`, where
//!   `<name>` is the [`Joined`] name or a generated one.
//!
//! The kinds, each in its own file:
//!
//! * `stream_table` — [`super::KStream::join_table`], [`super::KStream::left_join_table`]:
//!   each stream record looks up the table's current value for its key; the
//!   stream side is not stored, so a table update never emits.
//! * `table_table` — [`super::KTable::join`], [`super::KTable::left_join`],
//!   [`super::KTable::outer_join`]: a change on either side emits the new
//!   joined row together with the old one.
//! * `stream_stream` — [`super::KStream::join_stream`] and its left/outer
//!   variants over [`JoinWindows`]: both sides are buffered in logged window
//!   stores; unmatched left/outer results wait in a logged key-value store
//!   until their window closes.
//! * `foreign_key` — [`super::KTable::join_on_foreign_key`],
//!   [`super::KTable::left_join_on_foreign_key`]: the left value names the
//!   right key; subscription and response topics connect the two sides.
//! * `global` — [`super::KStream::join_global`], [`super::KStream::left_join_global`]:
//!   a lookup in a [`super::GlobalKTable`] by a key mapped from the record;
//!   no co-partitioning needed.

mod foreign_key;
mod global;
mod list;
mod stream_stream;
mod stream_table;
mod table_table;
mod windows;

pub use list::ListSerde;
pub use windows::JoinWindows;

use std::marker::PhantomData;
use std::sync::Arc;

use crate::processor::node::ErasedNode;
use crate::processor::{
    Processor, ProcessorContext, ProcessorError, ProcessorNode, Record, StoreSerdes,
};
use crate::serdes::{Serde, SharedSerde};

use super::internal::Shared;
use super::{Data, KStream, KTable, Repartitioned};

/// Options of a stream join: a name (for generated nodes, stores and the
/// repartition topic) and serdes for the stream side's key and value, used
/// when the stream must be repartitioned (Kafka Streams' `Joined`/`StreamJoined`).
pub struct Joined<K, V> {
    pub(crate) name: Option<String>,
    pub(crate) key_serde: Option<SharedSerde<K>>,
    pub(crate) value_serde: Option<SharedSerde<V>>,
}

impl<K, V> Default for Joined<K, V> {
    fn default() -> Self {
        Joined {
            name: None,
            key_serde: None,
            value_serde: None,
        }
    }
}

impl<K: 'static, V: 'static> Joined<K, V> {
    /// No name, serdes from upstream or the registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Names the join: its nodes, stores and repartition topic derive from `name`.
    pub fn as_(name: impl Into<String>) -> Self {
        Joined {
            name: Some(name.into()),
            ..Self::default()
        }
    }

    /// The stream side's key serde.
    pub fn with_key_serde(mut self, serde: impl Serde<K>) -> Self {
        self.key_serde = Some(Arc::new(serde));
        self
    }

    /// The stream side's value serde.
    pub fn with_value_serde(mut self, serde: impl Serde<V>) -> Self {
        self.value_serde = Some(Arc::new(serde));
        self
    }
}

/// The base name of a join: the given one, else a generated `prefix…` name.
pub(crate) fn join_name(builder: &Shared, given: Option<String>, prefix: &str) -> String {
    builder.borrow_mut().name_or(given, prefix)
}

/// `stream`, or `stream` sent through `<base>-repartition` when its key was
/// changed upstream, so it is partitioned like the other join side.
pub(crate) fn copartitioned<K: Data, V: Data>(
    stream: &KStream<K, V>,
    base: &str,
    key_serde: Option<SharedSerde<K>>,
    value_serde: Option<SharedSerde<V>>,
) -> KStream<K, V> {
    if !stream.repartition_required {
        return stream.clone();
    }
    let mut options = Repartitioned::<K, V>::as_(base);
    options.key_serde = key_serde;
    options.value_serde = value_serde;
    stream.named(base).repartition(options)
}

/// The store holding `table`'s rows. A table without one (the result of
/// `filter`, `map_values` or a join) gets a materializing node below it
/// with a logged store `<base>-STORE`; joins read the other side from it.
pub(crate) fn materialized_store<K: Data, V: Data>(table: &KTable<K, V>, base: &str) -> String {
    if let Some(store) = &table.store_name {
        return store.clone();
    }
    let mut b = table.builder.borrow_mut();
    let store_name = format!("{base}-STORE");
    let key = b.serde(table.key_serde.clone(), None, &store_name, "key");
    let value = b.serde(table.value_serde.clone(), None, &store_name, "value");
    let store = b.add_store(store_name.clone(), true, StoreSerdes::new(key, value));
    let name = format!("{base}-MATERIALIZE");
    let store_for_node = store_name.clone();
    let node = b.add_processor(name, &[table.node], move || {
        materialize_node::<K, V>(store_for_node.clone())
    });
    b.connect_store(node, store);
    store_name
}

fn materialize_node<K: Data, V: Data>(
    store: String,
) -> Box<dyn crate::processor::node::ErasedNode> {
    use crate::processor::{Change, ProcessorContext, Record};
    crate::processor::node::fn_node(
        move |ctx: &ProcessorContext<'_, (), ()>, r: Record<K, Change<V>>| {
            let kv = ctx.key_value_store::<K, V>(&store)?;
            match &r.value.new {
                Some(v) => kv.put(&r.key, v),
                None => kv.delete(&r.key).map(|_| ()),
            }
        },
    )
}

/// Forwards every record unchanged: where the two branches of a join meet
/// (Kafka Streams' `KStreamPassThrough`): a stream–stream join's `-merge`
/// node, a foreign-key join's `-RESPONSES` node.
pub(super) struct PassThrough<K, V>(PhantomData<fn(K, V)>);

impl<K: Data, V: Data> PassThrough<K, V> {
    /// A pass-through node instance, for `add_processor`.
    pub(super) fn boxed() -> Box<dyn ErasedNode> {
        ProcessorNode::<_, K, V, K, V>::boxed(PassThrough(PhantomData))
    }
}

impl<K: Data, V: Data> Processor<K, V, K, V> for PassThrough<K, V> {
    fn process(
        &mut self,
        ctx: &ProcessorContext<'_, K, V>,
        record: Record<K, V>,
    ) -> Result<(), ProcessorError> {
        ctx.forward(record)
    }
}
