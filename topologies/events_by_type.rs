//! `events-by-type`: counts JSON events by the value of one of their fields.
//!
//! * reads `events` (key: any bytes or null, ignored; value: a JSON object
//!   such as `{"user":"u17","type":"click"}`);
//! * re-keys each event by its `field` (default `type`; a string field counts
//!   under its text, any other JSON value under its JSON text, a missing one
//!   under `(missing)`) with `select_key`, then `group_by_key` → `count`:
//!   the key change sends every event through the repartition topic
//!   `<application_id>-by-field-repartition`, and the counts live in the
//!   key-value store `field-counts` (changelog
//!   `<application_id>-field-counts-changelog`);
//! * writes every updated count to `event-counts` (key: the field value as
//!   UTF-8, value: the count as a big-endian 64-bit integer).
//!
//! A value that is not JSON is a deserialization error and follows
//! `deserialization_handler` (fail, skip, or dead-letter topic).

use serde_json::Value;

use super::{Param, Params, ShippedTopology};
use crate::serdes::JsonSerde;
use crate::topology::{
    Consumed, Grouped, Materialized, Produced, StreamsBuilder, Topology, TopologyError,
};

/// The default input topic.
pub const INPUT: &str = "events";
/// The default output topic.
pub const OUTPUT: &str = "event-counts";
/// The key of events that lack the field.
pub const MISSING: &str = "(missing)";

/// The registry entry.
pub const EVENTS_BY_TYPE: ShippedTopology = ShippedTopology {
    name: "events-by-type",
    description: "counts JSON events in events by one of their fields (select_key → group_by_key → count); every new count goes to event-counts",
    params: &[
        Param {
            name: "input_topic",
            default: INPUT,
            doc: "topic of JSON events (values: JSON objects)",
        },
        Param {
            name: "output_topic",
            default: OUTPUT,
            doc: "topic of counts (key: field value as UTF-8, value: i64 big-endian)",
        },
        Param {
            name: "field",
            default: "type",
            doc: "the event field to count by",
        },
    ],
    input_params: &["input_topic"],
    output_params: &["output_topic"],
    build,
    sample,
    dataset: None,
};

/// The counting key of `event` for `field`. See the module docs.
///
/// ```
/// use weir::topologies::events_by_type::key_of;
/// let event = serde_json::json!({"type": "click", "n": 3});
/// assert_eq!(key_of(&event, "type"), "click");
/// assert_eq!(key_of(&event, "n"), "3");
/// assert_eq!(key_of(&event, "user"), "(missing)");
/// ```
pub fn key_of(event: &Value, field: &str) -> String {
    match event.get(field) {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => MISSING.to_string(),
    }
}

/// Builds the events-by-type topology.
///
/// ```
/// let t = weir::topologies::find("events-by-type").unwrap();
/// let topology = weir::topologies::events_by_type::build(&t.params(&Default::default()).unwrap()).unwrap();
/// assert_eq!(topology.subtopology_count(), 2, "the re-key splits it at the repartition topic");
/// ```
pub fn build(params: &Params) -> Result<Topology, TopologyError> {
    let field = params.get("field").to_string();
    let builder = StreamsBuilder::new();
    builder
        .stream::<Option<Vec<u8>>, Value>(
            params.get("input_topic"),
            Consumed::new().with_value_serde(JsonSerde::<Value>::new()),
        )
        .select_key(move |_, event: &Value| key_of(event, &field))
        .group_by_key(Grouped::as_("by-field"))
        .count(Materialized::as_("field-counts"))
        .to_stream()
        .to(params.get("output_topic"), Produced::new());
    builder.build()
}

const TYPES: &[&str] = &[
    "view",
    "click",
    "search",
    "add_to_cart",
    "purchase",
    "login",
    "logout",
];

/// Sample event `i` (null key): a deterministic user and type, e.g.
/// `{"user":"u17","type":"click","seq":i}`.
pub fn sample(i: u64) -> (Option<Vec<u8>>, Vec<u8>) {
    let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5851_F42D_4C95_7F2D;
    x ^= x >> 31;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 29;
    let kind = TYPES[(x % TYPES.len() as u64) as usize];
    let user = (x >> 8) % 500;
    let event = serde_json::json!({ "user": format!("u{user}"), "type": kind, "seq": i });
    (None, event.to_string().into_bytes())
}
