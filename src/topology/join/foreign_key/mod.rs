//! Foreign-key table–table joins: [`KTable::join_on_foreign_key`],
//! [`KTable::left_join_on_foreign_key`] (Kafka Streams' KIP-213 design).
//!
//! The left table `K → V` names a right-table key `KO = foreign_key(V)`.
//! The two tables need not be co-partitioned; they talk through two
//! internal topics:
//!
//! 1. **Subscribe** (left task): on a left change the left side sends, keyed
//!    by the *foreign* key, a subscription `(instruction, hash(new value),
//!    primary key)` to `<name>-subscription-registration-repartition`. When
//!    the foreign key changed, the old foreign key first gets an
//!    unsubscription (and, when the row was deleted, one that asks for a
//!    response so the result is retracted).
//! 2. **Receive** (right task, co-partitioned with the right table): the
//!    subscription is stored in `<name>-subscription-store` under
//!    `len(KO) ++ KO ++ K` and answered with the right row, keyed by the
//!    primary key, on `<name>-subscription-response-repartition`. A right
//!    change answers every subscriber of its key (a prefix scan).
//! 3. **Resolve** (left task): a response is applied only if its hash equals
//!    the hash of the left row *now*; otherwise it answers a value that was
//!    since replaced (a stale response) and is dropped. The result row is
//!    `joiner(left, right)`; inner joins emit a deletion when the right row
//!    is missing, left joins `joiner(left, None)`.
//!
//! So results follow changes of either side and of the foreign key: the
//! old foreign key's subscription is removed, and the new one's response
//! replaces the old result. The hash is 64-bit FNV-1a of the serialized
//! left value (Kafka Streams uses 128-bit murmur3). Result changes carry no
//! old value (as in Kafka Streams, which does not send old values here).
//!
//! Each step is a named processor in `processors.rs`; the message formats
//! are in `wire.rs`.

mod processors;
mod wire;

use std::sync::Arc;

use crate::processor::{Change, ProcessorError, ProcessorNode, StoreSerdes};
use crate::serdes::{BytesSerde, SharedSerde};

use super::{PassThrough, join_name, materialized_store};
use crate::topology::{Data, KTable};
use processors::{
    ForeignKeyFn, ForeignTableJoin, JoinFn, ResponseJoin, Serdes, SubscriptionReceive,
    SubscriptionSend,
};

impl<K: Data, V: Data> KTable<K, V> {
    /// Inner foreign-key join: each left row whose `foreign_key(value)` has a
    /// row in `other` becomes `joiner(value, other_row)`; see the module docs.
    ///
    /// ```
    /// use weir::topology::{Consumed, Materialized, Produced, StreamsBuilder};
    /// let builder = StreamsBuilder::new();
    /// let orders = builder.table::<String, String>("orders", Consumed::new(), Materialized::as_("orders"));
    /// let customers = builder.table::<String, String>("customers", Consumed::new(), Materialized::as_("customers"));
    /// orders // value: "customer-id"
    ///     .join_on_foreign_key(&customers, |v: &String| v.clone(), |o: &String, c: &String| format!("{o}:{c}"))
    ///     .to_stream()
    ///     .to("order-customers", Produced::new());
    /// assert_eq!(builder.build().unwrap().subtopology_count(), 2);
    /// ```
    pub fn join_on_foreign_key<KO: Data, VO: Data, VR: Data>(
        &self,
        other: &KTable<KO, VO>,
        foreign_key: impl Fn(&V) -> KO + Send + Sync + 'static,
        joiner: impl Fn(&V, &VO) -> VR + Send + Sync + 'static,
    ) -> KTable<K, VR> {
        self.try_join_on_foreign_key(
            other,
            move |v| Ok(foreign_key(v)),
            move |v, o| Ok(joiner(v, o)),
        )
    }

    /// Left foreign-key join: every left row becomes `joiner(value,
    /// other_row)`, `None` when `other` has no row for its foreign key.
    pub fn left_join_on_foreign_key<KO: Data, VO: Data, VR: Data>(
        &self,
        other: &KTable<KO, VO>,
        foreign_key: impl Fn(&V) -> KO + Send + Sync + 'static,
        joiner: impl Fn(&V, Option<&VO>) -> VR + Send + Sync + 'static,
    ) -> KTable<K, VR> {
        self.try_left_join_on_foreign_key(
            other,
            move |v| Ok(foreign_key(v)),
            move |v, o| Ok(joiner(v, o)),
        )
    }

    /// [`join_on_foreign_key`](Self::join_on_foreign_key) with a
    /// `foreign_key` and `joiner` that may fail: a failure is a processing
    /// error of the record being processed (a left update for the
    /// extractor, a response to it for the joiner).
    pub fn try_join_on_foreign_key<KO: Data, VO: Data, VR: Data>(
        &self,
        other: &KTable<KO, VO>,
        foreign_key: impl Fn(&V) -> Result<KO, ProcessorError> + Send + Sync + 'static,
        joiner: impl Fn(&V, &VO) -> Result<VR, ProcessorError> + Send + Sync + 'static,
    ) -> KTable<K, VR> {
        let join = Arc::new(move |v: &V, o: Option<&VO>| o.map(|o| joiner(v, o)).transpose());
        self.foreign_key_join(other, Arc::new(foreign_key), join, false)
    }

    /// [`left_join_on_foreign_key`](Self::left_join_on_foreign_key) with a
    /// `foreign_key` and `joiner` that may fail (as
    /// [`try_join_on_foreign_key`](Self::try_join_on_foreign_key)).
    pub fn try_left_join_on_foreign_key<KO: Data, VO: Data, VR: Data>(
        &self,
        other: &KTable<KO, VO>,
        foreign_key: impl Fn(&V) -> Result<KO, ProcessorError> + Send + Sync + 'static,
        joiner: impl Fn(&V, Option<&VO>) -> Result<VR, ProcessorError> + Send + Sync + 'static,
    ) -> KTable<K, VR> {
        let join = Arc::new(move |v: &V, o: Option<&VO>| joiner(v, o).map(Some));
        self.foreign_key_join(other, Arc::new(foreign_key), join, true)
    }

    fn foreign_key_join<KO: Data, VO: Data, VR: Data>(
        &self,
        other: &KTable<KO, VO>,
        foreign_key: ForeignKeyFn<V, KO>,
        join: JoinFn<V, VO, VR>,
        left_join: bool,
    ) -> KTable<K, VR> {
        let prefix = if left_join {
            "KTABLE-FK-LEFTJOIN-"
        } else {
            "KTABLE-FK-JOIN-"
        };
        let name = join_name(&self.builder, self.name.clone(), prefix);
        let left_store = materialized_store(self, &format!("{name}-LEFT"));
        let right_store = materialized_store(other, &format!("{name}-RIGHT"));
        let mut b = self.builder.borrow_mut();
        let serdes = Serdes {
            key: b.serde(self.key_serde.clone(), None, &name, "key"),
            value: b.serde(self.value_serde.clone(), None, &name, "value"),
            foreign_key: b.serde(other.key_serde.clone(), None, &name, "foreign key"),
            foreign_value: b.serde(other.value_serde.clone(), None, &name, "foreign value"),
        };
        let bytes: SharedSerde<Vec<u8>> = Arc::new(BytesSerde);
        let left_index = b.store_index(&left_store).expect("store was added");
        let right_index = b.store_index(&right_store).expect("store was added");
        let subscriptions = format!("{name}-subscription-store");
        let subscriptions_index = b.add_store(
            subscriptions.clone(),
            true,
            StoreSerdes::new(bytes.clone(), bytes.clone()),
        );

        // 1. Subscribe: left changes → subscription topic, keyed by foreign key.
        let (s, fk) = (serdes.clone(), foreign_key);
        let subscribe = b.add_processor(format!("{name}-SUBSCRIBE"), &[self.node], move || {
            ProcessorNode::<_, K, Change<V>, KO, Vec<u8>>::boxed(SubscriptionSend {
                serdes: s.clone(),
                foreign_key: fk.clone(),
                left_join,
            })
        });
        let registration = b.add_repartition(
            subscribe,
            &format!("{name}-subscription-registration"),
            serdes.foreign_key.clone(),
            bytes.clone(),
        );

        // 2a. Receive: store the subscription, answer with the right row.
        let (s, subs, right) = (serdes.clone(), subscriptions.clone(), right_store.clone());
        let receive = b.add_processor(format!("{name}-RECEIVE"), &[registration], move || {
            ProcessorNode::<_, KO, Vec<u8>, Vec<u8>, Vec<u8>>::boxed(SubscriptionReceive {
                serdes: s.clone(),
                subscriptions: subs.clone(),
                right_store: right.clone(),
            })
        });
        b.connect_store(receive, subscriptions_index);
        b.connect_store(receive, right_index);

        // 2b. Right changes: answer every subscriber of the key.
        let (s, subs) = (serdes.clone(), subscriptions.clone());
        let right_changes =
            b.add_processor(format!("{name}-RIGHT-CHANGES"), &[other.node], move || {
                ProcessorNode::<_, KO, Change<VO>, Vec<u8>, Vec<u8>>::boxed(ForeignTableJoin {
                    serdes: s.clone(),
                    subscriptions: subs.clone(),
                })
            });
        b.connect_store(right_changes, subscriptions_index);
        let responses = b.add_processor(
            format!("{name}-RESPONSES"),
            &[receive, right_changes],
            PassThrough::<Vec<u8>, Vec<u8>>::boxed,
        );
        let response_source = b.add_repartition(
            responses,
            &format!("{name}-subscription-response"),
            bytes.clone(),
            bytes,
        );

        // 3. Resolve: drop stale responses, join with the current left row.
        let (s, left) = (serdes, left_store);
        let resolve = b.add_processor(format!("{name}-RESOLVE"), &[response_source], move || {
            ProcessorNode::<_, Vec<u8>, Vec<u8>, K, Change<VR>>::boxed(ResponseJoin {
                serdes: s.clone(),
                left_store: left.clone(),
                join: join.clone(),
            })
        });
        b.connect_store(resolve, left_index);
        drop(b);
        KTable::new(
            self.builder.clone(),
            resolve,
            self.key_serde.clone(),
            None,
            None,
        )
    }
}
