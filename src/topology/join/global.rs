//! Stream–global-table joins: [`KStream::join_global`], [`KStream::left_join_global`].
//!
//! A stream record maps to a global-table key with `key_mapper(key, value)`
//! and looks it up in the task's [`crate::topology::GlobalStores`]. No
//! co-partitioning is needed (every instance holds the whole table), so a
//! re-keyed stream is *not* repartitioned and the result keeps the stream's
//! key. The lookup sees the table as loaded at that moment: at start-up the
//! whole topic is loaded before any record is processed; afterwards updates
//! arrive concurrently with stream processing (as in Kafka Streams).

use std::sync::Arc;

use crate::processor::node::{ErasedNode, fn_node};
use crate::processor::{KeyOrValue, ProcessorContext, ProcessorError, Record};
use crate::state::StoreError;
use crate::topology::{Data, GlobalKTable, KStream, NodeBuildContext, NodeFactory, NodeKind};

impl<K: Data, V: Data> KStream<K, V> {
    /// Inner join with a global table: records whose mapped key has a row
    /// are forwarded as `joiner(value, row)`; the others are dropped.
    ///
    /// ```
    /// use weir::topology::{Consumed, Materialized, Produced, StreamsBuilder};
    /// let builder = StreamsBuilder::new();
    /// let products = builder.global_table::<String, String>("products", Consumed::new(), Materialized::as_("products"));
    /// builder
    ///     .stream::<String, String>("orders", Consumed::new()) // value: product id
    ///     .join_global(&products, |_, product: &String| product.clone(), |_: &String, name: &String| name.clone())
    ///     .to("order-products", Produced::new());
    /// assert_eq!(builder.build().unwrap().global_topics(), vec![("products".to_owned(), "products".to_owned())]);
    /// ```
    pub fn join_global<GK: Data, GV: Data, VR: Data>(
        &self,
        global: &GlobalKTable<GK, GV>,
        key_mapper: impl Fn(&K, &V) -> GK + Send + Sync + 'static,
        joiner: impl Fn(&V, &GV) -> VR + Send + Sync + 'static,
    ) -> KStream<K, VR> {
        self.global_join(global, key_mapper, "KSTREAM-JOIN-GLOBAL-", move |v, row| {
            row.map(|row| joiner(v, row))
        })
    }

    /// Left join with a global table: every record is forwarded as
    /// `joiner(value, row)`, `None` when the mapped key has no row.
    pub fn left_join_global<GK: Data, GV: Data, VR: Data>(
        &self,
        global: &GlobalKTable<GK, GV>,
        key_mapper: impl Fn(&K, &V) -> GK + Send + Sync + 'static,
        joiner: impl Fn(&V, Option<&GV>) -> VR + Send + Sync + 'static,
    ) -> KStream<K, VR> {
        self.global_join(
            global,
            key_mapper,
            "KSTREAM-LEFTJOIN-GLOBAL-",
            move |v, row| Some(joiner(v, row)),
        )
    }

    fn global_join<GK: Data, GV: Data, VR: Data>(
        &self,
        global: &GlobalKTable<GK, GV>,
        key_mapper: impl Fn(&K, &V) -> GK + Send + Sync + 'static,
        prefix: &str,
        join: impl Fn(&V, Option<&GV>) -> Option<VR> + Send + Sync + 'static,
    ) -> KStream<K, VR> {
        let (mapper, join) = (Arc::new(key_mapper), Arc::new(join));
        let table = global.clone();
        let factory: NodeFactory = Arc::new(move |ctx: &NodeBuildContext<'_>| {
            global_join_node::<K, V, GK, GV, VR>(
                ctx.globals.get(&table.store).cloned(),
                table.clone(),
                mapper.clone(),
                join.clone(),
            )
        });
        let mut b = self.builder.borrow_mut();
        let name = b.name_or(self.name.clone(), prefix);
        let node = b.add_node(name, NodeKind::Processor, &[self.node], Some(factory));
        drop(b);
        KStream::new(
            self.builder.clone(),
            node,
            self.key_serde.clone(),
            None,
            self.repartition_required,
        )
    }
}

type Mapper<K, V, GK> = Arc<dyn Fn(&K, &V) -> GK + Send + Sync>;
type Join<V, GV, VR> = Arc<dyn Fn(&V, Option<&GV>) -> Option<VR> + Send + Sync>;

fn global_join_node<K: Data, V: Data, GK: Data, GV: Data, VR: Data>(
    store: Option<Arc<crate::topology::GlobalStore>>,
    table: GlobalKTable<GK, GV>,
    mapper: Mapper<K, V, GK>,
    join: Join<V, GV, VR>,
) -> Box<dyn ErasedNode> {
    let mut key_buf = Vec::new();
    fn_node(move |ctx: &ProcessorContext<'_, K, VR>, r: Record<K, V>| {
        let Some(store) = &store else {
            return Err(ProcessorError::from(StoreError::InvalidState {
                store: table.store.clone(),
                message: "is a global store that was not loaded; run the topology with \
                          KafkaStreams or TopologyTestDriver, which load global tables"
                    .to_owned(),
            }));
        };
        key_buf.clear();
        table
            .key_serde
            .serialize(&table.store, &mapper(&r.key, &r.value), &mut key_buf)
            .map_err(ProcessorError::serialize(KeyOrValue::Key, &table.store))?;
        let row = store
            .get(&key_buf)?
            .map(|bytes| table.value_serde.deserialize(&table.store, &bytes))
            .transpose()
            .map_err(ProcessorError::store_read(KeyOrValue::Value, &table.store))?;
        match join(&r.value, row.as_ref()) {
            Some(value) => ctx.forward(r.with_value(value)),
            None => Ok(()),
        }
    })
}
