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

use std::sync::Arc;

use crate::processor::StoreSerdes;
use crate::processor::node::fn_node;
use crate::processor::{Change, KeyOrValue, ProcessorContext, ProcessorError, Record};
use crate::serdes::{BytesSerde, Serde, SharedSerde};

use super::{join_name, materialized_store};
use crate::topology::{Data, KTable};

const DELETE_NO_PROPAGATE: u8 = 0;
const DELETE_AND_PROPAGATE: u8 = 1;
const PROPAGATE_IF_FOUND: u8 = 2;
const PROPAGATE_NULL_IF_MISSING: u8 = 3;

/// 64-bit FNV-1a.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn put_hash(out: &mut Vec<u8>, hash: Option<u64>) {
    match hash {
        Some(h) => {
            out.push(1);
            out.extend_from_slice(&h.to_be_bytes());
        }
        None => out.push(0),
    }
}

fn take_hash(raw: &[u8]) -> Option<(Option<u64>, &[u8])> {
    match raw.split_first()? {
        (0, rest) => Some((None, rest)),
        (_, rest) => {
            let (h, rest) = rest.split_first_chunk::<8>()?;
            Some((Some(u64::from_be_bytes(*h)), rest))
        }
    }
}

fn corrupt(what: &str) -> ProcessorError {
    ProcessorError::StoreRead {
        what: KeyOrValue::Value,
        store: what.to_owned(),
        source: crate::serdes::SerdeError::Length {
            type_name: "foreign-key join message",
            expected: 1,
            actual: 0,
        },
    }
}

fn ser<T: 'static>(
    serde: &dyn Serde<T>,
    target: &str,
    value: &T,
    what: KeyOrValue,
) -> Result<Vec<u8>, ProcessorError> {
    let mut out = Vec::new();
    serde
        .serialize(target, value, &mut out)
        .map_err(ProcessorError::serialize(what, target))?;
    Ok(out)
}

fn de<T: 'static>(
    serde: &dyn Serde<T>,
    target: &str,
    bytes: &[u8],
    what: KeyOrValue,
) -> Result<T, ProcessorError> {
    serde
        .deserialize(target, bytes)
        .map_err(ProcessorError::store_read(what, target))
}

/// `len(ko) ++ ko`: the prefix of every subscription to `ko`.
fn subscription_prefix(ko: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + ko.len());
    out.extend_from_slice(&(ko.len() as u32).to_be_bytes());
    out.extend_from_slice(ko);
    out
}

/// The smallest key greater than every key starting with `prefix`.
fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// The serdes the four processors need.
struct Serdes<K, V, KO, VO> {
    key: SharedSerde<K>,
    value: SharedSerde<V>,
    foreign_key: SharedSerde<KO>,
    foreign_value: SharedSerde<VO>,
}

impl<K, V, KO, VO> Clone for Serdes<K, V, KO, VO> {
    fn clone(&self) -> Self {
        Serdes {
            key: self.key.clone(),
            value: self.value.clone(),
            foreign_key: self.foreign_key.clone(),
            foreign_value: self.foreign_value.clone(),
        }
    }
}

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
        let join = Arc::new(move |v: &V, o: Option<&VO>| o.map(|o| joiner(v, o)));
        self.foreign_key_join(other, Arc::new(foreign_key), join, false)
    }

    /// Left foreign-key join: every left row becomes `joiner(value,
    /// other_row)`, `None` when `other` has no row for its foreign key.
    pub fn left_join_on_foreign_key<KO: Data, VO: Data, VR: Data>(
        &self,
        other: &KTable<KO, VO>,
        foreign_key: impl Fn(&V) -> KO + Send + Sync + 'static,
        joiner: impl Fn(&V, Option<&VO>) -> VR + Send + Sync + 'static,
    ) -> KTable<K, VR> {
        let join = Arc::new(move |v: &V, o: Option<&VO>| Some(joiner(v, o)));
        self.foreign_key_join(other, Arc::new(foreign_key), join, true)
    }

    #[allow(clippy::type_complexity)]
    fn foreign_key_join<KO: Data, VO: Data, VR: Data>(
        &self,
        other: &KTable<KO, VO>,
        foreign_key: Arc<dyn Fn(&V) -> KO + Send + Sync>,
        join: Arc<dyn Fn(&V, Option<&VO>) -> Option<VR> + Send + Sync>,
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
            let (s, fk) = (s.clone(), fk.clone());
            fn_node(
                move |ctx: &ProcessorContext<'_, KO, Vec<u8>>, r: Record<K, Change<V>>| {
                    let target = ctx.processor_name();
                    let pk = ser(s.key.as_ref(), target, &r.key, KeyOrValue::Key)?;
                    let hash = match &r.value.new {
                        Some(v) => {
                            Some(fnv1a(&ser(s.value.as_ref(), target, v, KeyOrValue::Value)?))
                        }
                        None => None,
                    };
                    let new_fk = r.value.new.as_ref().map(|v| fk(v));
                    let old_fk = r.value.old.as_ref().map(|v| fk(v));
                    let message = |instruction: u8| {
                        let mut out = vec![instruction];
                        put_hash(&mut out, hash);
                        out.extend_from_slice(&pk);
                        out
                    };
                    if let Some(old_fk) = old_fk {
                        let old_bytes =
                            ser(s.foreign_key.as_ref(), target, &old_fk, KeyOrValue::Key)?;
                        let new_bytes = match &new_fk {
                            Some(k) => {
                                Some(ser(s.foreign_key.as_ref(), target, k, KeyOrValue::Key)?)
                            }
                            None => None,
                        };
                        if new_bytes.as_deref() != Some(old_bytes.as_slice()) {
                            let instruction = if new_fk.is_some() {
                                DELETE_NO_PROPAGATE
                            } else {
                                DELETE_AND_PROPAGATE
                            };
                            ctx.forward(Record {
                                key: old_fk,
                                value: message(instruction),
                                timestamp: r.timestamp,
                                headers: r.headers.clone(),
                            })?;
                        }
                    }
                    if let Some(new_fk) = new_fk {
                        let instruction = if left_join {
                            PROPAGATE_NULL_IF_MISSING
                        } else {
                            PROPAGATE_IF_FOUND
                        };
                        ctx.forward(Record {
                            key: new_fk,
                            value: message(instruction),
                            timestamp: r.timestamp,
                            headers: r.headers,
                        })?;
                    }
                    Ok(())
                },
            )
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
            let (s, subs, right) = (s.clone(), subs.clone(), right.clone());
            fn_node(
                move |ctx: &ProcessorContext<'_, Vec<u8>, Vec<u8>>, r: Record<KO, Vec<u8>>| {
                    let store = ctx.key_value_store::<Vec<u8>, Vec<u8>>(&subs)?;
                    let (&instruction, rest) =
                        r.value.split_first().ok_or_else(|| corrupt(&subs))?;
                    let (hash, pk) = take_hash(rest).ok_or_else(|| corrupt(&subs))?;
                    let ko = ser(s.foreign_key.as_ref(), &subs, &r.key, KeyOrValue::Key)?;
                    let mut entry = subscription_prefix(&ko);
                    entry.extend_from_slice(pk);
                    let respond = |right: Option<&VO>| -> Result<(), ProcessorError> {
                        let mut out = Vec::new();
                        put_hash(&mut out, hash);
                        if let Some(v) = right {
                            out.push(1);
                            out.extend(ser(s.foreign_value.as_ref(), &subs, v, KeyOrValue::Value)?);
                        } else {
                            out.push(0);
                        }
                        ctx.forward(Record {
                            key: pk.to_vec(),
                            value: out,
                            timestamp: r.timestamp,
                            headers: r.headers.clone(),
                        })
                    };
                    match instruction {
                        DELETE_NO_PROPAGATE | DELETE_AND_PROPAGATE => {
                            if store.get(&entry)?.is_some() {
                                store.delete(&entry)?;
                            }
                            if instruction == DELETE_AND_PROPAGATE {
                                respond(None)?;
                            }
                        }
                        _ => {
                            let mut stored = Vec::new();
                            put_hash(&mut stored, hash);
                            stored.push(instruction);
                            store.put(&entry, &stored)?;
                            let row = ctx.key_value_store::<KO, VO>(&right)?.get(&r.key)?;
                            if row.is_some() || instruction == PROPAGATE_NULL_IF_MISSING {
                                respond(row.as_ref())?;
                            }
                        }
                    }
                    Ok(())
                },
            )
        });
        b.connect_store(receive, subscriptions_index);
        b.connect_store(receive, right_index);

        // 2b. Right changes: answer every subscriber of the key.
        let (s, subs) = (serdes.clone(), subscriptions.clone());
        let right_changes =
            b.add_processor(format!("{name}-RIGHT-CHANGES"), &[other.node], move || {
                let (s, subs) = (s.clone(), subs.clone());
                fn_node(
                    move |ctx: &ProcessorContext<'_, Vec<u8>, Vec<u8>>,
                          r: Record<KO, Change<VO>>| {
                        let store = ctx.key_value_store::<Vec<u8>, Vec<u8>>(&subs)?;
                        let ko = ser(s.foreign_key.as_ref(), &subs, &r.key, KeyOrValue::Key)?;
                        let prefix = subscription_prefix(&ko);
                        let end = prefix_end(&prefix);
                        let value = match &r.value.new {
                            Some(v) => {
                                Some(ser(s.foreign_value.as_ref(), &subs, v, KeyOrValue::Value)?)
                            }
                            None => None,
                        };
                        for (entry, stored) in store.range(Some(&prefix), end.as_ref())? {
                            let (hash, _) = take_hash(&stored).ok_or_else(|| corrupt(&subs))?;
                            let mut out = Vec::new();
                            put_hash(&mut out, hash);
                            match &value {
                                Some(v) => {
                                    out.push(1);
                                    out.extend_from_slice(v);
                                }
                                None => out.push(0),
                            }
                            ctx.forward(Record {
                                key: entry[prefix.len()..].to_vec(),
                                value: out,
                                timestamp: r.timestamp,
                                headers: r.headers.clone(),
                            })?;
                        }
                        Ok(())
                    },
                )
            });
        b.connect_store(right_changes, subscriptions_index);
        let responses = b.add_processor(
            format!("{name}-RESPONSES"),
            &[receive, right_changes],
            || {
                fn_node(
                    |ctx: &ProcessorContext<'_, Vec<u8>, Vec<u8>>, r: Record<Vec<u8>, Vec<u8>>| {
                        ctx.forward(r)
                    },
                )
            },
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
            let (s, left, join) = (s.clone(), left.clone(), join.clone());
            fn_node(
                move |ctx: &ProcessorContext<'_, K, Change<VR>>, r: Record<Vec<u8>, Vec<u8>>| {
                    let key = de(s.key.as_ref(), &left, &r.key, KeyOrValue::Key)?;
                    let (hash, rest) = take_hash(&r.value).ok_or_else(|| corrupt(&left))?;
                    let (&has_row, row) = rest.split_first().ok_or_else(|| corrupt(&left))?;
                    let current = ctx.key_value_store::<K, V>(&left)?.get(&key)?;
                    let current_hash = match &current {
                        Some(v) => {
                            Some(fnv1a(&ser(s.value.as_ref(), &left, v, KeyOrValue::Value)?))
                        }
                        None => None,
                    };
                    if current_hash != hash {
                        return Ok(()); // answers a left value that was replaced since
                    }
                    let row = if has_row == 1 {
                        Some(de(s.foreign_value.as_ref(), &left, row, KeyOrValue::Value)?)
                    } else {
                        None
                    };
                    let new = current.and_then(|v| join(&v, row.as_ref()));
                    ctx.forward(Record {
                        key,
                        value: Change { new, old: None },
                        timestamp: r.timestamp,
                        headers: r.headers,
                    })
                },
            )
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
