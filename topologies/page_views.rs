//! `page-views`: page views per page per minute, one final result per window.
//!
//! * reads `page-views` (key: the page path as UTF-8; value: JSON
//!   `{"user":"u7","ts":1699999980000}`, where `ts` is the view's **event
//!   time** in ms since the epoch — the timestamp extractor reads it, so the
//!   Kafka record timestamp does not matter);
//! * counts the views of each page in tumbling 1-minute windows
//!   `[start, start + 60 000)` aligned to the epoch, accepting records up to
//!   `grace_ms` out of order (window store `page-views-per-minute`, changelog
//!   `<application_id>-page-views-per-minute-changelog`; trigger bookkeeping
//!   `page-views-per-minute-trigger`); the store keeps windows for
//!   `retention_ms` of stream time (default one hour), so the last hour's
//!   counts can be queried (`/stores/page-views-per-minute/keys/{page}/windows`);
//! * emits **once per page and minute**, when the window closes (stream time
//!   ≥ window end + grace), to `page-views-per-minute` (key: Kafka Streams'
//!   time-windowed key = the page as UTF-8 followed by the window start as a
//!   big-endian 64-bit integer; value: the count as a big-endian 64-bit
//!   integer);
//! * writes views that arrive after their window closed to
//!   `page-views-late` (same key and value as the input; headers
//!   `weir.late.*` say why, see [`crate::windows::LATE_HEADER_REASON`]);
//!   they are not counted. The runtime creates this topic when missing.
//!
//! The input is keyed by page, so the aggregation needs no repartition topic:
//! a page's views stay in one partition and one task.
//!
//! The sample ([`sample`], `weir generate page-views`) has fixed event times
//! from [`SAMPLE_START_MS`] (2023-11-14) on. Window changelogs are
//! `compact,delete` with retention = window retention + 1 day *by record
//! time*, which is event time (as in Kafka Streams), so the broker deletes
//! the changelog records of such old windows at its next retention check: a
//! run without restarts is unaffected, but a task restored after that check
//! has lost the counts of its open windows. Restart experiments need
//! current event times (`tests/runtime_windows.rs` shifts the sample to now).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Param, Params, ShippedTopology};
use crate::serdes::{JsonSerde, StringSerde};
use crate::time::ValueTimestamp;
use crate::topology::{
    Consumed, Grouped, Materialized, Produced, StreamsBuilder, Topology, TopologyError,
};
use crate::windows::{EmitStrategy, TimeWindows};

/// The default input topic.
pub const INPUT: &str = "page-views";
/// The default output topic.
pub const OUTPUT: &str = "page-views-per-minute";
/// The default late-records topic.
pub const LATE: &str = "page-views-late";
/// The window size (ms).
pub const WINDOW_MS: i64 = 60_000;
/// The window store.
pub const STORE: &str = "page-views-per-minute";

/// The registry entry.
pub const PAGE_VIEWS: ShippedTopology = ShippedTopology {
    name: "page-views",
    description: "counts page views per page per minute (event time, emit-final); \
                  one result per page and minute goes to page-views-per-minute",
    params: &[
        Param {
            name: "input_topic",
            default: INPUT,
            doc: "topic of page views (key: page, value: JSON {user, ts})",
        },
        Param {
            name: "output_topic",
            default: OUTPUT,
            doc: "topic of final counts (key: page ++ window start i64 BE, value: i64 BE)",
        },
        Param {
            name: "late_topic",
            default: LATE,
            doc: "topic of views that arrived after their window closed (created when missing)",
        },
        Param {
            name: "grace_ms",
            default: "10000",
            doc: "how late (ms of event time) a view may arrive and still count",
        },
        Param {
            name: "retention_ms",
            default: "3600000",
            doc: "how long (ms of event time) windows stay in the store for queries; \
                  at least 60000 + grace_ms",
        },
    ],
    input_params: &["input_topic"],
    output_params: &["output_topic", "late_topic"],
    build,
    sample,
    dataset: None,
};

/// One page view: the input value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageView {
    /// Who viewed the page.
    pub user: String,
    /// When (event time, ms since the epoch).
    pub ts: i64,
}

/// Builds the page-views topology; a `grace_ms` or `retention_ms` that is
/// not a non-negative integer is an error naming the parameter, and a
/// retention shorter than window size + grace is an error naming the store.
///
/// ```
/// let pv = weir::topologies::find("page-views").unwrap();
/// let topology = weir::topologies::page_views::build(&pv.params(&Default::default()).unwrap()).unwrap();
/// assert_eq!(topology.subtopology_count(), 1);
/// assert_eq!(topology.late_topics(), ["page-views-late"]);
/// ```
pub fn build(params: &Params) -> Result<Topology, TopologyError> {
    let millis = |name: &'static str| -> Result<u64, TopologyError> {
        params
            .get(name)
            .parse()
            .map_err(|_| TopologyError::InvalidParameter {
                name,
                value: params.get(name).to_string(),
                requirement: "it must be a whole number of milliseconds >= 0, e.g. 10000",
            })
    };
    let grace_ms = millis("grace_ms")?;
    let retention_ms = millis("retention_ms")?;
    let windows = TimeWindows::of_size_with_grace(
        Duration::from_millis(WINDOW_MS as u64),
        Duration::from_millis(grace_ms),
    )
    .map_err(|source| TopologyError::Window {
        store: STORE.to_string(),
        source,
    })?;
    let builder = StreamsBuilder::new();
    builder
        .stream::<String, PageView>(
            params.get("input_topic"),
            Consumed::with(StringSerde, JsonSerde::<PageView>::new())
                .with_timestamp_extractor(ValueTimestamp::new(|v: &PageView| v.ts)),
        )
        .group_by_key(Grouped::new())
        .windowed_by(windows)
        .emit(EmitStrategy::OnWindowClose)
        .late_records_to(params.get("late_topic"))
        .count(Materialized::as_(STORE).with_retention(Duration::from_millis(retention_ms)))
        .to_stream()
        .to(params.get("output_topic"), Produced::new());
    builder.build()
}

/// The pages the sample views.
pub const PAGES: &[&str] = &[
    "/",
    "/search",
    "/cart",
    "/checkout",
    "/docs",
    "/pricing",
    "/blog",
    "/login",
];

/// Event time of sample 0: a minute boundary (2023-11-14T22:13:00Z).
pub const SAMPLE_START_MS: i64 = 1_699_999_980_000;
/// Event time between consecutive samples (ms): 600 views per minute.
pub const SAMPLE_STEP_MS: i64 = 100;
/// Samples `i >= LATE_FROM` with `i % LATE_EVERY == LATE_PHASE` are late.
pub const LATE_FROM: u64 = 5_000;
/// See [`LATE_FROM`].
pub const LATE_EVERY: u64 = 997;
/// See [`LATE_FROM`].
pub const LATE_PHASE: u64 = 500;
/// How far behind its position a late sample's event time is (ms).
pub const LATE_BY_MS: i64 = 300_000;
/// The most a regular sample's event time is behind its position (ms);
/// below the default grace, so regular samples are never late.
pub const JITTER_MS: i64 = 5_000;

fn mix(i: u64, salt: u64) -> u64 {
    let mut x = i
        .wrapping_add(salt)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(1);
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^ (x >> 29)
}

/// Whether sample `i` is one of the late ones (see [`LATE_FROM`]).
pub fn sample_is_late(i: u64) -> bool {
    i >= LATE_FROM && i % LATE_EVERY == LATE_PHASE
}

/// The page and event time of sample `i`, without encoding: views advance
/// [`SAMPLE_STEP_MS`] per sample from [`SAMPLE_START_MS`], each up to
/// [`JITTER_MS`] out of order; [`sample_is_late`] ones are [`LATE_BY_MS`]
/// behind, far enough to be late in any partition once a few thousand views
/// flowed.
pub fn sample_view(i: u64) -> (&'static str, i64) {
    let page = PAGES[(mix(i, 1) % PAGES.len() as u64) as usize];
    let position = SAMPLE_START_MS + i as i64 * SAMPLE_STEP_MS;
    let ts = if sample_is_late(i) {
        position - LATE_BY_MS
    } else {
        position - (mix(i, 2) % JITTER_MS as u64) as i64
    };
    (page, ts)
}

/// Sample view `i` as (key, value) bytes: see [`sample_view`].
pub fn sample(i: u64) -> (Option<Vec<u8>>, Vec<u8>) {
    let (page, ts) = sample_view(i);
    let view = PageView {
        user: format!("u{}", mix(i, 3) % 50),
        ts,
    };
    let value = serde_json::to_vec(&view).expect("a PageView always serializes");
    (Some(page.as_bytes().to_vec()), value)
}
