//! `word-count`: counts words in lines of text.
//!
//! * reads `text-lines` (key: any bytes or null, ignored; value: a UTF-8 line);
//! * splits lines into lower-case words, re-keys by word (through the
//!   repartition topic `<application_id>-counts-repartition`) and counts them
//!   in the key-value store `counts` (changelog
//!   `<application_id>-counts-changelog`);
//! * writes every updated count to `word-counts` (key: the word as UTF-8,
//!   value: the count as a big-endian 64-bit integer, Kafka's `LongSerde`).

use super::{Param, Params, ShippedTopology};
use crate::topology::{
    Consumed, Grouped, Materialized, Produced, StreamsBuilder, Topology, TopologyError,
};

/// The default input topic.
pub const INPUT: &str = "text-lines";
/// The default output topic.
pub const OUTPUT: &str = "word-counts";

/// The registry entry.
pub const WORD_COUNT: ShippedTopology = ShippedTopology {
    name: "word-count",
    description: "counts words of the lines in text-lines; every new count goes to word-counts",
    params: &[
        Param {
            name: "input_topic",
            default: INPUT,
            doc: "topic of text lines (values: UTF-8)",
        },
        Param {
            name: "output_topic",
            default: OUTPUT,
            doc: "topic of word counts (key: word, value: i64 big-endian)",
        },
    ],
    input_params: &["input_topic"],
    output_params: &["output_topic"],
    build,
    sample,
    dataset: None,
};

/// Builds the word-count topology.
///
/// ```
/// let wc = weir::topologies::find("word-count").unwrap();
/// let topology = weir::topologies::word_count::build(&wc.params(&Default::default()).unwrap()).unwrap();
/// assert_eq!(topology.subtopology_count(), 2);
/// ```
pub fn build(params: &Params) -> Result<Topology, TopologyError> {
    let builder = StreamsBuilder::new();
    builder
        .stream::<Option<Vec<u8>>, String>(params.get("input_topic"), Consumed::new())
        .flat_map_values(|line: String| {
            line.split_whitespace()
                .map(str::to_lowercase)
                .collect::<Vec<_>>()
        })
        .group_by(|_, word: &String| word.clone(), Grouped::as_("counts"))
        .count(Materialized::as_("counts"))
        .to_stream()
        .to(params.get("output_topic"), Produced::new());
    builder.build()
}

const WORDS: &[&str] = &[
    "stream",
    "table",
    "kafka",
    "weir",
    "state",
    "window",
    "join",
    "task",
    "commit",
    "offset",
    "record",
    "partition",
    "changelog",
    "restore",
    "rebalance",
    "exactly",
    "once",
    "rust",
];

/// Sample line `i` (null key): five words chosen deterministically from a small vocabulary.
pub fn sample(i: u64) -> (Option<Vec<u8>>, Vec<u8>) {
    let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(1);
    let mut line = String::new();
    for n in 0..5 {
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        if n > 0 {
            line.push(' ');
        }
        line.push_str(WORDS[(x % WORDS.len() as u64) as usize]);
    }
    (None, line.into_bytes())
}
