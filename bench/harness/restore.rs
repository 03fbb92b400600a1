//! `weir-bench restore`: how long an instance killed while holding a large
//! key-value store takes to produce output again, Weir against Kafka
//! Streams, with its local state kept and with its state directory wiped.
//!
//! For each system and store size *N*:
//!
//! 1. Fresh input and output topics; the input gets *N* records with
//!    distinct keys (written before the system starts), so the `count`
//!    workload's RocksDB store and its changelog hold *N* keys.
//! 2. The system (one stream thread, `exactly_once_v2`, the classic group
//!    protocol with static membership so that a restarted instance takes
//!    its partitions back at once) runs until its committed input offsets
//!    reach the end of the input.
//! 3. For each case, *kept* then *wiped*: SIGKILL the process (for *wiped*
//!    also delete its state directory), restart it with the same
//!    `application.id`, state directory and instance id, and at the moment
//!    of the restart write one probe record with a new key to every input
//!    partition. Time to first output: from the restart to the first probe's
//!    count visible to a `read_committed` reader; time to all output: to
//!    the last partition's. The probes can only be counted once the task's
//!    store is restored, so the second figure bounds the restore; the
//!    restore rate is the changelog's records over it. Then wait until the
//!    probes' offsets are committed before the next kill.
//!
//! Kafka Streams runs twice: with its defaults (under exactly-once an
//! unclean shutdown wipes the task's stores and restores them from the
//! changelog's start) and with KIP-892's `enable.transactional.statestores`
//! (Kafka Streams 4.4: the stores survive a crash). The section it writes
//! in BENCHMARKS.md is kept when `weir-bench report` rewrites the file.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseRecord, Producer};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};

use crate::chart::{self, Bar};
use crate::dcmon::inputs_done;
use crate::run::{
    self, RunArgs, Settings, System, committed_reader, create_topics, delete_topics, producer,
    secs, send,
};

/// Where the section starts and ends in BENCHMARKS.md.
pub const BEGIN: &str = "<!-- restore:begin -->";
/// See [`BEGIN`].
pub const END: &str = "<!-- restore:end -->";

/// What to run.
pub struct RestoreArgs {
    pub bootstrap: String,
    /// Store sizes (distinct keys) to measure.
    pub keys: Vec<u64>,
    pub partitions: i32,
    pub commit_ms: u64,
    /// `weir`, `kstreams`, `kstreams-tx` (transactional state stores).
    pub systems: Vec<String>,
    pub kstreams_dir: PathBuf,
    pub kstreams_version: String,
    pub java_opts: Vec<String>,
    /// Longest any wait may take.
    pub timeout_secs: u64,
    pub work_dir: PathBuf,
    pub out: PathBuf,
    pub chart: PathBuf,
    pub command: String,
}

/// The systems this benchmark knows, as `(name, label)`.
pub const SYSTEMS: &[(&str, &str)] = &[
    ("weir", "Weir"),
    ("kstreams", "Kafka Streams"),
    ("kstreams-tx", "Kafka Streams, transactional stores"),
];

/// The cases, in the order they run.
const CASES: [Case; 2] = [Case::Kept, Case::Wiped];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Case {
    /// The state directory survives the kill.
    Kept,
    /// The state directory is deleted after the kill.
    Wiped,
}

impl Case {
    fn name(self) -> &'static str {
        match self {
            Case::Kept => "local state kept",
            Case::Wiped => "state directory wiped",
        }
    }
}

/// The figures of one restart.
struct Restart {
    system: String,
    keys: u64,
    case: Case,
    /// Changelog records of the store when the process was killed.
    changelog: u64,
    first: Option<Duration>,
    all: Option<Duration>,
    error: Option<String>,
}

fn label(system: &str) -> &'static str {
    SYSTEMS
        .iter()
        .find(|(name, _)| *name == system)
        .map(|(_, l)| *l)
        .unwrap_or("?")
}

/// Writes `keys` records with distinct keys; returns how long it took.
fn load(bootstrap: &str, topic: &str, keys: u64) -> Result<Duration> {
    let started = Instant::now();
    let p = producer(bootstrap, "20")?;
    let mut key = String::new();
    for i in 0..keys {
        key.clear();
        write!(key, "key-{i:09}")?;
        send(&p, topic, key.as_bytes(), b"1", 0)?;
        if i % 10_000 == 0 {
            p.poll(Duration::ZERO);
        }
    }
    p.flush(Duration::from_secs(120))?;
    Ok(started.elapsed())
}

/// Writes one probe record with a new key to every partition.
fn probe(bootstrap: &str, topic: &str, partitions: i32, tag: &str) -> Result<HashSet<Vec<u8>>> {
    let p = producer(bootstrap, "0")?;
    let mut keys = HashSet::new();
    for partition in 0..partitions {
        let key = format!("probe-{tag}-{partition}");
        let record = BaseRecord::to(topic)
            .key(key.as_bytes())
            .payload(&b"1"[..])
            .partition(partition);
        p.send(record).map_err(|(e, _)| e)?;
        keys.insert(key.into_bytes());
    }
    p.flush(Duration::from_secs(30))?;
    Ok(keys)
}

/// A `read_committed` reader of `topic` from its current end.
fn reader_at_end(bootstrap: &str, topic: &str, partitions: i32) -> Result<BaseConsumer> {
    let consumer = committed_reader(bootstrap, &format!("{topic}-restore-reader"))?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        let (_, high) = consumer.fetch_watermarks(topic, p, Duration::from_secs(10))?;
        tpl.add_partition_offset(topic, p, Offset::Offset(high))?;
    }
    consumer.assign(&tpl)?;
    Ok(consumer)
}

/// Records in the application's changelog topics (end offsets summed).
fn changelog_records(bootstrap: &str, app_id: &str) -> Result<u64> {
    let client: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()?;
    let md = client.fetch_metadata(None, Duration::from_secs(10))?;
    let mut total = 0;
    for t in md.topics() {
        if t.name().starts_with(app_id) && t.name().ends_with("-changelog") {
            for p in t.partitions() {
                let (low, high) =
                    client.fetch_watermarks(t.name(), p.id(), Duration::from_secs(10))?;
                total += (high - low).max(0) as u64;
            }
        }
    }
    Ok(total)
}

/// One system and store size: everything from a fresh topic to cleanup.
struct Bench<'a> {
    a: &'a RestoreArgs,
    /// Distinct keys loaded.
    keys: u64,
    /// The system's label in the report.
    label: &'static str,
    settings: Settings,
    system: System,
    args: RunArgs,
    log: PathBuf,
}

impl Bench<'_> {
    fn spawn(&self) -> Result<Child> {
        run::spawn(&self.settings, &self.system, &self.args, &self.log)
    }

    fn alive(&self, child: &mut Child) -> Result<()> {
        if let Ok(Some(status)) = child.try_wait() {
            bail!("exited early ({status}); log: {}", self.log.display());
        }
        Ok(())
    }

    /// Waits until the committed input offsets reach the input's end.
    fn wait_committed(&self, child: &mut Child) -> Result<Duration> {
        let started = Instant::now();
        let client: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.a.bootstrap)
            .set("group.id", &self.args.app_id)
            .create()?;
        while !inputs_done(&client, &[&self.args.input], self.a.partitions)? {
            self.alive(child)?;
            if started.elapsed() > Duration::from_secs(self.a.timeout_secs) {
                bail!(
                    "input not committed after {} s (log: {})",
                    self.a.timeout_secs,
                    self.log.display()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(started.elapsed())
    }

    /// Kills `child`, restarts it in `case` and times the probes' output.
    fn restart(&self, child: &mut Child, case: Case, out: &mut Restart) -> Result<Child> {
        child.kill().context("SIGKILL")?;
        child.wait()?;
        if case == Case::Wiped {
            std::fs::remove_dir_all(&self.args.state_dir)
                .with_context(|| format!("wiping {}", self.args.state_dir.display()))?;
        }
        out.changelog = changelog_records(&self.a.bootstrap, &self.args.app_id)?;
        let reader = reader_at_end(&self.a.bootstrap, &self.args.output, self.a.partitions)?;
        let t0 = Instant::now();
        let mut next = self.spawn()?;
        match self.time_probes(&mut next, &reader, case, t0, out) {
            Ok(()) => Ok(next),
            Err(e) => {
                run::stop(&mut next);
                Err(e)
            }
        }
    }

    /// Writes the probes and waits for their counts, then for the commit.
    fn time_probes(
        &self,
        next: &mut Child,
        reader: &BaseConsumer,
        case: Case,
        t0: Instant,
        out: &mut Restart,
    ) -> Result<()> {
        let tag = if case == Case::Kept { "kept" } else { "wiped" };
        let mut waiting = probe(&self.a.bootstrap, &self.args.input, self.a.partitions, tag)?;
        while !waiting.is_empty() {
            self.alive(next)?;
            if t0.elapsed() > Duration::from_secs(self.a.timeout_secs) {
                bail!(
                    "{} of {} probes not counted {} s after the restart (log: {})",
                    waiting.len(),
                    self.a.partitions,
                    self.a.timeout_secs,
                    self.log.display()
                );
            }
            if let Some(m) = reader.poll(Duration::from_millis(5)) {
                let m = m?;
                if m.key().is_some_and(|k| waiting.remove(k)) {
                    out.first.get_or_insert(t0.elapsed());
                    if waiting.is_empty() {
                        out.all = Some(t0.elapsed());
                    }
                }
            }
        }
        self.wait_committed(next)?;
        Ok(())
    }

    /// Loads, runs, and restarts once per case.
    fn measure(&self, results: &mut Vec<Restart>) -> Result<()> {
        let keys = self.keys;
        create_topics(
            &self.a.bootstrap,
            &[&self.args.input, &self.args.output],
            self.a.partitions,
        )?;
        let loaded = load(&self.a.bootstrap, &self.args.input, keys)?;
        eprintln!(
            "weir-bench:     {keys} keys written in {:.1} s",
            loaded.as_secs_f64()
        );
        let mut child = self.spawn()?;
        let outcome = (|| -> Result<()> {
            let took = self.wait_committed(&mut child)?;
            eprintln!(
                "weir-bench:     counted and committed in {:.1} s",
                took.as_secs_f64()
            );
            for case in CASES {
                let mut r = Restart {
                    system: self.label.to_string(),
                    keys,
                    case,
                    changelog: 0,
                    first: None,
                    all: None,
                    error: None,
                };
                let step = self.restart(&mut child, case, &mut r);
                match step {
                    Ok(next) => child = next,
                    Err(e) => r.error = Some(format!("{e:#}")),
                }
                eprintln!(
                    "weir-bench:     {}: changelog {} records, first output {:?}, all {:?}{}",
                    case.name(),
                    r.changelog,
                    r.first,
                    r.all,
                    r.error
                        .as_deref()
                        .map(|e| format!(" FAILED: {e}"))
                        .unwrap_or_default()
                );
                let failed = r.error.is_some();
                results.push(r);
                if failed {
                    break;
                }
            }
            Ok(())
        })();
        run::stop(&mut child);
        outcome
    }
}

fn settings(a: &RestoreArgs, keys: u64) -> Settings {
    Settings {
        bootstrap: a.bootstrap.clone(),
        records: keys,
        warmup_records: 0,
        keys,
        value_bytes: 1,
        partitions: a.partitions,
        commit_ms: a.commit_ms,
        latency_rate: 0,
        latency_secs: 0,
        timeout_secs: a.timeout_secs,
        kstreams_dir: a.kstreams_dir.clone(),
        java_opts: a.java_opts.clone(),
        work_dir: a.work_dir.clone(),
    }
}

/// Weir's settings: the classic group protocol, and any `KEY=VALUE` pairs
/// in `BENCH_RESTORE_WEIR_SET` (comma-separated; to try restore settings,
/// or `bench.exe=PATH` to restore with another weir-bench build).
fn weir_config() -> Vec<(String, String)> {
    let mut config = vec![("group_protocol".to_string(), "classic".to_string())];
    if let Ok(pairs) = std::env::var("BENCH_RESTORE_WEIR_SET") {
        for pair in pairs.split(',').filter(|p| !p.is_empty()) {
            if let Some((k, v)) = pair.split_once('=') {
                config.push((k.to_string(), v.to_string()));
            }
        }
    }
    config
}

/// Runs every system and size and rewrites the section and its chart.
pub fn run(a: &RestoreArgs) -> Result<()> {
    for s in &a.systems {
        if !SYSTEMS.iter().any(|(name, _)| name == s) {
            bail!("unknown system {s}; use weir, kstreams or kstreams-tx");
        }
    }
    std::fs::create_dir_all(a.work_dir.join("logs"))?;
    let started = Instant::now();
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs();
    let mut results = Vec::new();
    for &keys in &a.keys {
        for (n, s) in a.systems.iter().enumerate() {
            let app_id = format!("restore-{stamp}-{keys}-{n}");
            eprintln!("weir-bench: restore, {} with {keys} keys", label(s));
            let bench = Bench {
                a,
                keys,
                label: label(s),
                settings: settings(a, keys),
                system: System {
                    kind: if s == "weir" { "weir" } else { "kstreams" }.to_string(),
                    threads: 1,
                    settings: Vec::new(),
                },
                args: RunArgs {
                    workload: "count".to_string(),
                    exactly_once: true,
                    input: format!("{app_id}-in"),
                    output: format!("{app_id}-out"),
                    table: format!("{app_id}-unused"),
                    state_dir: a.work_dir.join("state").join(&app_id),
                    instance_id: Some(format!("{app_id}-instance")),
                    kstreams_props: if s == "kstreams-tx" {
                        vec![("enable.transactional.statestores".into(), "true".into())]
                    } else {
                        Vec::new()
                    },
                    // The classic protocol, as Kafka Streams uses: under
                    // KIP-848 a SIGKILLed static member keeps its instance id
                    // until its session times out, and the restarted one is
                    // refused (UNRELEASED_INSTANCE_ID).
                    weir_config: weir_config(),
                    app_id: app_id.clone(),
                },
                log: a.work_dir.join("logs").join(format!("{app_id}.log")),
            };
            let before = results.len();
            if let Err(e) = bench.measure(&mut results) {
                eprintln!("weir-bench:     FAILED: {e:#}");
                if results.len() == before {
                    results.push(Restart {
                        system: label(s).to_string(),
                        keys,
                        case: Case::Kept,
                        changelog: 0,
                        first: None,
                        all: None,
                        error: Some(format!("{e:#}")),
                    });
                }
            }
            let _ = delete_topics(
                &a.bootstrap,
                &[&bench.args.input, &bench.args.output],
                &format!("{app_id}-"),
            );
            let _ = std::fs::remove_dir_all(&bench.args.state_dir);
        }
    }
    write_chart(&a.chart, &results)?;
    let text = section(a, &results, started.elapsed());
    crate::sections::write(&a.out, (BEGIN, END), &text)?;
    eprintln!(
        "weir-bench: wrote the restore section of {} and {} in {:.0} s",
        a.out.display(),
        a.chart.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn write_chart(path: &Path, results: &[Restart]) -> Result<()> {
    let mut groups: Vec<(String, Vec<Bar>)> = Vec::new();
    for r in results {
        let g = format!("{} keys, {}", r.keys, r.case.name());
        let bar = Bar {
            label: r.system.replace(", transactional stores", " tx"),
            value: r.first.map(|d| d.as_secs_f64()),
            colour: match r.system.as_str() {
                "Weir" => chart::WEIR,
                "Kafka Streams" => chart::KSTREAMS,
                _ => chart::KSTREAMS_DARK,
            },
        };
        // Weir's tasks run again one by one: its last one too.
        let last = (r.system == "Weir" && r.case == Case::Wiped).then(|| Bar {
            label: "Weir, last task".to_string(),
            value: r.all.map(|d| d.as_secs_f64()),
            colour: chart::WEIR_DARK,
        });
        match groups.iter_mut().find(|(name, _)| *name == g) {
            Some((_, v)) => v.extend([bar].into_iter().chain(last)),
            None => groups.push((g, [bar].into_iter().chain(last).collect())),
        }
    }
    chart::bars(
        path,
        "restart to first output, s (lower is better)",
        &groups,
        |v| format!("{v:.2}"),
    )
}

/// Kafka Streams' time ÷ Weir's for row `r` (a Kafka Streams row), of the
/// time `at` picks (first or all output).
fn ratio(results: &[Restart], r: &Restart, at: fn(&Restart) -> Option<Duration>) -> Option<f64> {
    let weir = results
        .iter()
        .find(|w| w.system == "Weir" && w.keys == r.keys && w.case == r.case)?;
    match (at(weir), at(r)) {
        (Some(w), Some(k)) if r.system != "Weir" => {
            Some(k.as_secs_f64() / w.as_secs_f64().max(1e-3))
        }
        _ => None,
    }
}

fn speedup(results: &[Restart], r: &Restart, at: fn(&Restart) -> Option<Duration>) -> String {
    ratio(results, r, at)
        .map(|x| format!("{x:.1}×"))
        .unwrap_or_default()
}

/// The target line: the lowest first-output ratio of each case against
/// the bound the issue sets (≥ 10× with local state kept, ≥ 2× wiped).
fn targets(results: &[Restart]) -> String {
    let mut parts = Vec::new();
    for (case, bound) in [(Case::Kept, 10.0), (Case::Wiped, 2.0)] {
        let lowest = results
            .iter()
            .filter(|r| r.case == case)
            .filter_map(|r| ratio(results, r, |x| x.first))
            .reduce(f64::min);
        if let Some(low) = lowest {
            let verdict = if low >= bound { "met" } else { "missed" };
            parts.push(format!(
                "{}: first output ≥ {bound:.0}× faster than every Kafka Streams row, lowest {low:.1}× — {verdict}",
                case.name()
            ));
        }
    }
    parts.join("; ")
}

fn section(a: &RestoreArgs, results: &[Restart], took: Duration) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{BEGIN}");
    let _ = writeln!(
        s,
        "## Restore after a crash\n\nRegenerate: `{}` (bench/harness/restore.rs); measured \
         separately from the tables above, in {:.0} s. The `count` workload (one \
         stream thread, `exactly_once_v2`, commit interval {} ms, RocksDB key-value \
         store with a changelog, {} input partitions) counts N records with distinct \
         keys, so its store and changelog hold N keys; the process is then SIGKILLed \
         and restarted with the same `application.id`, state directory and static \
         member id of the classic group protocol (Weir `instance_id` with \
         `group_protocol=classic`, Kafka Streams `group.instance.id`; under KIP-848 a \
         SIGKILLed static member holds its id until its session times out), once with \
         its local state kept and once with its state directory deleted. At the \
         restart one probe record with a new key goes to every input partition. \
         *First output*: restart → the first probe's count visible to a \
         `read_committed` reader; *all output*: → the last partition's (every task \
         restored). *Restore rate* (wiped only): changelog records / all output (a lower \
         bound: it includes start-up and joining the group). Kafka Streams {} runs with its \
         defaults (after an unclean shutdown under exactly-once it wipes the task's \
         stores and restores them from the changelog) and with \
         `enable.transactional.statestores=true` (KIP-892). JVM options: {}. \
         Weir reads stores more than 100,000 records behind one at a time (`LARGE_BACKLOG` \
         in src/runtime/restore.rs) and each task runs again as soon as its own store is \
         current, while Kafka Streams restores a thread's tasks together: a wiped Weir \
         restore's first output comes with its first task and its all output with its \
         last, so both columns are compared.\n",
        a.command,
        took.as_secs_f64(),
        a.commit_ms,
        a.partitions,
        a.kstreams_version,
        if a.java_opts.is_empty() {
            "JVM defaults".to_string()
        } else {
            a.java_opts.join(" ")
        }
    );
    let _ = writeln!(s, "![restore chart](bench/restore.png)\n");
    let _ = writeln!(
        s,
        "| keys | case | system | changelog records | first output s | all output s | restore rate records/s | Kafka Streams ÷ Weir (first output) | Kafka Streams ÷ Weir (all output) |"
    );
    let _ = writeln!(
        s,
        "| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    for r in results {
        // Only a wiped store reads its whole changelog for certain.
        let rate = match (r.all, r.case) {
            (Some(all), Case::Wiped) => format!("{:.0}", r.changelog as f64 / all.as_secs_f64()),
            _ => "—".into(),
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.keys,
            r.case.name(),
            r.system,
            r.changelog,
            secs(r.first),
            secs(r.all),
            rate,
            speedup(results, r, |x| x.first),
            speedup(results, r, |x| x.all)
        );
        if let Some(e) = &r.error {
            let _ = writeln!(s, "| | | failed: {} | | | | | | |", e.replace('|', "/"));
        }
    }
    let targets = targets(results);
    if !targets.is_empty() {
        let _ = writeln!(s, "\nTargets: {targets}.");
    }
    let _ = writeln!(s, "{END}");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn restart(system: &str, case: Case, first_ms: u64, all_ms: u64) -> Restart {
        Restart {
            system: system.to_string(),
            keys: 1000,
            case,
            changelog: 1000,
            first: Some(Duration::from_millis(first_ms)),
            all: Some(Duration::from_millis(all_ms)),
            error: None,
        }
    }

    #[test]
    fn targets_compare_first_output_against_every_kafka_streams_row() {
        let results = [
            restart("Weir", Case::Kept, 300, 300),
            restart("Weir", Case::Wiped, 1000, 4000),
            restart("Kafka Streams", Case::Kept, 3300, 3600),
            restart("Kafka Streams", Case::Wiped, 9000, 9500),
            restart(
                "Kafka Streams, transactional stores",
                Case::Kept,
                2700,
                3000,
            ),
            restart(
                "Kafka Streams, transactional stores",
                Case::Wiped,
                1500,
                1800,
            ),
        ];
        let line = targets(&results);
        assert!(
            line.contains("local state kept: first output ≥ 10× faster than every Kafka Streams row, lowest 9.0× — missed"),
            "{line}"
        );
        assert!(
            line.contains("state directory wiped: first output ≥ 2× faster than every Kafka Streams row, lowest 1.5× — missed"),
            "{line}"
        );
        assert_eq!(speedup(&results, &results[3], |r| r.first), "9.0×");
        assert_eq!(speedup(&results, &results[3], |r| r.all), "2.4×");
        assert_eq!(speedup(&results, &results[1], |r| r.all), "");
    }
}
