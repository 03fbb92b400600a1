//! The applications that ship with Weir, registered by name.
//!
//! Each entry documents its topics and builds its [`Topology`]; the `weir`
//! binary runs them (`weir run <name>`), describes them and generates sample
//! input for them.

use std::collections::BTreeMap;

use crate::topology::{Topology, TopologyError};

pub mod datacenter_monitor;
pub mod events_by_type;
pub mod order_enrichment;
pub mod page_views;
pub mod word_count;

/// A topology that ships with Weir.
#[derive(Clone, Copy, Debug)]
pub struct ShippedTopology {
    /// The name `weir run` takes.
    pub name: &'static str,
    /// What it computes.
    pub description: &'static str,
    /// Its parameters (`topology.<name>` settings): name, default, meaning.
    pub params: &'static [Param],
    /// The parameters naming topics it reads (created by `weir generate` when missing).
    pub input_params: &'static [&'static str],
    /// The parameters naming topics it writes (created by `weir generate` when missing).
    pub output_params: &'static [&'static str],
    /// Builds the topology with checked parameters.
    pub build: fn(&Params) -> Result<Topology, TopologyError>,
    /// Makes sample input record `i` (for the first input topic, unless
    /// `dataset` says otherwise).
    pub sample: SampleFn,
    /// For topologies whose samples span several input topics and carry
    /// injected patterns: where each sample goes and what was injected.
    pub dataset: Option<&'static SampleDataset>,
}

/// Makes sample input record `i` as (key, value) bytes; a `None` key is a null key.
pub type SampleFn = fn(u64) -> (Option<Vec<u8>>, Vec<u8>);

/// Makes sample input record `i` with its event times moved by a shift (ms).
pub type ShiftedSampleFn = fn(u64, i64) -> (Option<Vec<u8>>, Vec<u8>);

/// Samples that span several input topics and come with a ground truth.
#[derive(Clone, Copy, Debug)]
pub struct SampleDataset {
    /// The input topic of sample `i`: an index into `input_params`.
    pub input_of: fn(u64) -> usize,
    /// Samples in one complete dataset (what `weir generate` writes by default).
    pub len: fn() -> u64,
    /// Sample `i` with its event times moved by a shift (ms).
    pub sample_at: ShiftedSampleFn,
    /// The ground truth of samples `start..start + count` shifted by
    /// `shift_ms`, as JSON: what was injected in the complete datasets
    /// among them.
    pub truth: fn(u64, u64, i64) -> serde_json::Value,
    /// The shift under which samples `start..start + count` end at
    /// wall-clock time `now_ms` (`weir generate` writes current event
    /// times: the broker's time retention deletes records, and records
    /// derived from them, whose timestamps are older than `retention.ms`).
    pub shift_to_end_at: fn(i64, u64, u64) -> i64,
}

/// A parameter of a shipped topology.
#[derive(Clone, Copy, Debug)]
pub struct Param {
    /// Its name (set as `topology.<name>`).
    pub name: &'static str,
    /// Its default value.
    pub default: &'static str,
    /// What it means.
    pub doc: &'static str,
}

/// The checked parameters of a shipped topology, defaults filled in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Params(BTreeMap<String, String>);

impl Params {
    /// The value of parameter `name` (declared, so always present).
    pub fn get(&self, name: &str) -> &str {
        self.0.get(name).map(String::as_str).unwrap_or_default()
    }
}

/// An unknown parameter was given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "config key 'topology.{key}': topology '{topology}' has no such parameter; it takes {known}"
)]
pub struct ParamError {
    /// The topology.
    pub topology: String,
    /// The unknown parameter.
    pub key: String,
    /// The parameters it takes.
    pub known: String,
}

impl ShippedTopology {
    /// Checks `given` against the declared parameters and fills in defaults.
    pub fn params(&self, given: &BTreeMap<String, String>) -> Result<Params, ParamError> {
        let mut values: BTreeMap<String, String> = self
            .params
            .iter()
            .map(|p| (p.name.to_string(), p.default.to_string()))
            .collect();
        for (k, v) in given {
            if !values.contains_key(k) {
                return Err(ParamError {
                    topology: self.name.to_string(),
                    key: k.clone(),
                    known: self
                        .params
                        .iter()
                        .map(|p| p.name)
                        .collect::<Vec<_>>()
                        .join(", "),
                });
            }
            values.insert(k.clone(), v.clone());
        }
        Ok(Params(values))
    }

    /// Input topic names under `params`.
    pub fn input_topics(&self, params: &Params) -> Vec<String> {
        self.input_params
            .iter()
            .map(|p| params.get(p).to_string())
            .collect()
    }

    /// Output topic names under `params`.
    pub fn output_topics(&self, params: &Params) -> Vec<String> {
        self.output_params
            .iter()
            .map(|p| params.get(p).to_string())
            .collect()
    }
}

/// Every shipped topology.
pub const ALL: &[ShippedTopology] = &[
    word_count::WORD_COUNT,
    events_by_type::EVENTS_BY_TYPE,
    page_views::PAGE_VIEWS,
    order_enrichment::ORDER_ENRICHMENT,
    datacenter_monitor::DATACENTER_MONITOR,
];

/// The shipped topology called `name`.
///
/// ```
/// let wc = weir::topologies::find("word-count").unwrap();
/// let params = wc.params(&Default::default()).unwrap();
/// assert_eq!(wc.input_topics(&params), ["text-lines"]);
/// assert!(weir::topologies::find("nope").is_none());
/// ```
pub fn find(name: &str) -> Option<&'static ShippedTopology> {
    ALL.iter().find(|t| t.name == name)
}
