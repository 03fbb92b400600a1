//! Stream–table joins: [`KStream::join_table`] and [`KStream::left_join_table`].
//!
//! Invariants:
//! * the join node is connected to the table's store, so stream and table
//!   are in one sub-topology and co-partitioned (see [`super`]);
//! * each stream record reads the table's value for its key *as of the
//!   moment the task processes it*, and the result carries the stream
//!   record's timestamp; the stream side is not stored, so table updates
//!   never emit (a stream record that arrives before its table row joins
//!   with nothing: inner drops it, left emits it with `None`).

use std::sync::Arc;

use crate::processor::node::fn_node;
use crate::processor::{ProcessorContext, Record};

use super::{Joined, copartitioned, join_name, materialized_store};
use crate::topology::{Data, KStream, KTable};

impl<K: Data, V: Data> KStream<K, V> {
    /// Inner join with `table`: each record whose key has a row in the table
    /// is forwarded as `joiner(value, row)`; records without a row are dropped.
    ///
    /// ```
    /// use weir::topology::{Consumed, Joined, Materialized, Produced, StreamsBuilder};
    /// let builder = StreamsBuilder::new();
    /// let names = builder.table::<String, String>("names", Consumed::new(), Materialized::as_("names"));
    /// builder
    ///     .stream::<String, i64>("clicks", Consumed::new())
    ///     .join_table(&names, |clicks: &i64, name: &String| format!("{name}:{clicks}"), Joined::new())
    ///     .to("named-clicks", Produced::new());
    /// assert_eq!(builder.build().unwrap().subtopology_count(), 1);
    /// ```
    pub fn join_table<VT: Data, VR: Data>(
        &self,
        table: &KTable<K, VT>,
        joiner: impl Fn(&V, &VT) -> VR + Send + Sync + 'static,
        joined: Joined<K, V>,
    ) -> KStream<K, VR> {
        let joiner = Arc::new(joiner);
        self.stream_table_join(table, joined, "KSTREAM-JOIN-", move |v, row| {
            row.map(|row| joiner(v, row))
        })
    }

    /// Left join with `table`: every record is forwarded as
    /// `joiner(value, row)`, with `None` when the key has no row.
    pub fn left_join_table<VT: Data, VR: Data>(
        &self,
        table: &KTable<K, VT>,
        joiner: impl Fn(&V, Option<&VT>) -> VR + Send + Sync + 'static,
        joined: Joined<K, V>,
    ) -> KStream<K, VR> {
        let joiner = Arc::new(joiner);
        self.stream_table_join(table, joined, "KSTREAM-LEFTJOIN-", move |v, row| {
            Some(joiner(v, row))
        })
    }

    fn stream_table_join<VT: Data, VR: Data>(
        &self,
        table: &KTable<K, VT>,
        joined: Joined<K, V>,
        prefix: &str,
        join: impl Fn(&V, Option<&VT>) -> Option<VR> + Send + Sync + 'static,
    ) -> KStream<K, VR> {
        let name = join_name(
            &self.builder,
            joined.name.or_else(|| self.name.clone()),
            prefix,
        );
        let stream = copartitioned(self, &name, joined.key_serde, joined.value_serde);
        let store = materialized_store(table, &name);
        let join = Arc::new(join);
        let mut b = self.builder.borrow_mut();
        let store_index = b.store_index(&store).expect("the table's store was added");
        let node = b.add_processor(name, &[stream.node], move || {
            let join = join.clone();
            let store = store.clone();
            fn_node(move |ctx: &ProcessorContext<'_, K, VR>, r: Record<K, V>| {
                let row = ctx.key_value_store::<K, VT>(&store)?.get(&r.key)?;
                match join(&r.value, row.as_ref()) {
                    Some(value) => ctx.forward(r.with_value(value)),
                    None => Ok(()),
                }
            })
        });
        b.connect_store(node, store_index);
        drop(b);
        KStream::new(
            self.builder.clone(),
            node,
            stream.key_serde.clone(),
            None,
            false,
        )
    }
}
