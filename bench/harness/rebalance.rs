//! `weir-bench rebalance`: what a scale-out from 2 to 3 instances costs the
//! output, Weir against Kafka Streams.
//!
//! For each system:
//!
//! 1. Fresh input and output topics of P partitions. A producer writes a
//!    fixed rate of records, spread evenly over the input partitions by
//!    number; a record's key names its input partition (`p3-17`), so an
//!    output record says which input partition it came from wherever the
//!    system writes it.
//! 2. Two instances (one stream thread each, `exactly_once_v2`, the
//!    `count` workload: a RocksDB store with a changelog per task) start on
//!    it, each with its own state directory and the system's default group
//!    protocol and assignor (Weir: its default `group_protocol`; Kafka
//!    Streams 4.4: classic, its own assignor). A `read_committed` reader
//!    notes when each output record becomes visible.
//! 3. Once every input partition has output and the warm-up has passed, the
//!    owners of the input partitions are read from the group
//!    (`DescribeGroup`, Kafka's admin client), a third instance starts, and
//!    the run goes on for a fixed time; the owners are read again at its end.
//!    A partition *moved* when its owner changed.
//! 4. Per input partition: the longest time between two consecutive
//!    visible outputs, before the scale-out (the steady state: about one
//!    commit interval) and from it to the end of the run (the gap the
//!    rebalance caused; a partition with no output since the scale-out
//!    counts to the end).
//!
//! The section it writes in BENCHMARKS.md is kept when `weir-bench report`
//! rewrites the file.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use rdkafka::consumer::Consumer;
use rdkafka::producer::{BaseRecord, Producer};
use rdkafka::{Message, Offset, TopicPartitionList};

use crate::chart::{self, Bar};
use crate::run::{
    self, RunArgs, Settings, System, committed_reader, create_topics, delete_topics, now_ms,
    producer, secs,
};

/// Where the section starts and ends in BENCHMARKS.md.
pub const BEGIN: &str = "<!-- rebalance:begin -->";
/// See [`BEGIN`].
pub const END: &str = "<!-- rebalance:end -->";

/// What to run.
pub struct RebalanceArgs {
    pub bootstrap: String,
    pub partitions: i32,
    /// Input records per second, all partitions together.
    pub rate: u64,
    /// Distinct keys per input partition.
    pub keys: u64,
    pub commit_ms: u64,
    /// Seconds of steady output before the third instance starts.
    pub warm_secs: u64,
    /// Seconds the run goes on after the third instance starts.
    pub after_secs: u64,
    /// `weir`, `kstreams`.
    pub systems: Vec<String>,
    pub kstreams_dir: PathBuf,
    pub kstreams_version: String,
    pub java_opts: Vec<String>,
    pub timeout_secs: u64,
    pub work_dir: PathBuf,
    pub out: PathBuf,
    pub chart: PathBuf,
    /// Further Weir settings for its instances.
    pub weir_config: Vec<(String, String)>,
    pub command: String,
}

/// One input partition's figures.
struct Partition {
    owner_before: String,
    owner_after: String,
    /// Longest gap between visible outputs before the scale-out.
    gap_before: Duration,
    /// Longest gap from the scale-out to the end of the run.
    gap_after: Duration,
}

impl Partition {
    fn moved(&self) -> bool {
        self.owner_before != self.owner_after
    }
}

/// One system's run.
struct Outcome {
    label: &'static str,
    partitions: Vec<Partition>,
    /// Distinct owners after the scale-out (3 when the new instance got work).
    owners_after: usize,
    error: Option<String>,
}

impl Outcome {
    fn max_gap(&self, moved: bool) -> Option<Duration> {
        self.partitions
            .iter()
            .filter(|p| p.moved() == moved)
            .map(|p| p.gap_after)
            .max()
    }
}

fn label(system: &str) -> &'static str {
    match system {
        "weir" => "Weir",
        _ => "Kafka Streams",
    }
}

/// The input partition an output key names (`p3-17` → 3).
fn partition_of(key: &[u8]) -> Option<usize> {
    let key = std::str::from_utf8(key).ok()?;
    key.strip_prefix('p')?.split_once('-')?.0.parse().ok()
}

/// Writes `rate` records per second until `stop`, spread over the
/// partitions by number, each timestamped when sent.
fn write_at_rate(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    rate: u64,
    keys: u64,
    stop: &AtomicBool,
) -> Result<u64> {
    let p = producer(bootstrap, "5")?;
    let started = Instant::now();
    let mut sent = 0u64;
    let mut key = String::new();
    while !stop.load(Ordering::Relaxed) {
        let due = started.elapsed().as_secs_f64() * rate as f64;
        while (sent as f64) < due {
            let partition = (sent % partitions as u64) as i32;
            key.clear();
            write!(key, "p{partition}-{}", (sent / partitions as u64) % keys)?;
            let record = BaseRecord::to(topic)
                .key(key.as_bytes())
                .payload(&b"1"[..])
                .partition(partition)
                .timestamp(now_ms());
            p.send(record).map_err(|(e, _)| e)?;
            sent += 1;
        }
        p.poll(Duration::ZERO);
        std::thread::sleep(Duration::from_millis(2));
    }
    p.flush(Duration::from_secs(30))?;
    Ok(sent)
}

/// Reads the output until `stop`, noting per input partition when each
/// output record became visible (time since `t0`).
fn read_arrivals(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    t0: Instant,
    arrivals: &Mutex<Vec<Vec<Duration>>>,
    stop: &AtomicBool,
) -> Result<()> {
    let reader = committed_reader(bootstrap, &format!("{topic}-rebalance-reader"))?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)?;
    }
    reader.assign(&tpl)?;
    while !stop.load(Ordering::Relaxed) {
        if let Some(m) = reader.poll(Duration::from_millis(5)) {
            let m = m?;
            if let Some(p) = m.key().and_then(partition_of) {
                let mut a = arrivals.lock().expect("arrivals");
                if let Some(v) = a.get_mut(p) {
                    v.push(t0.elapsed());
                }
            }
        }
    }
    Ok(())
}

/// The owner (client id) of every partition of `topic` in `group`, read
/// with Kafka's admin client (bench/kafka-streams `DescribeGroup`).
fn owners(a: &RebalanceArgs, group: &str, topic: &str) -> Result<BTreeMap<i32, String>> {
    let out = run::java(&a.kstreams_dir, &[], "dev.weir.bench.DescribeGroup")
        .arg(&a.bootstrap)
        .arg(group)
        .output()
        .context("running DescribeGroup (is bench/kafka-streams built?)")?;
    if !out.status.success() {
        bail!(
            "DescribeGroup failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let mut owners = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let mut f = line.split_whitespace();
        if let (Some(t), Some(p), Some(client)) = (f.next(), f.next(), f.next())
            && t == topic
        {
            owners.insert(p.parse()?, client.to_string());
        }
    }
    Ok(owners)
}

/// The longest gap between consecutive `arrivals` within `[from, to]`,
/// counting from `from` to the first and from the last to `to`.
fn longest_gap(arrivals: &[Duration], from: Duration, to: Duration) -> Duration {
    let mut last = from;
    let mut longest = Duration::ZERO;
    for &t in arrivals.iter().filter(|&&t| t > from && t <= to) {
        longest = longest.max(t - last);
        last = t;
    }
    longest.max(to.saturating_sub(last))
}

/// One system: topics, producer, reader, 2 instances, the third, figures.
struct Bench<'a> {
    a: &'a RebalanceArgs,
    label: &'static str,
    kind: String,
    app_id: String,
    input: String,
    output: String,
}

impl Bench<'_> {
    fn settings(&self) -> Settings {
        let a = self.a;
        Settings {
            bootstrap: a.bootstrap.clone(),
            records: 0,
            warmup_records: 0,
            keys: a.keys,
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

    fn spawn(&self, instance: &str) -> Result<Child> {
        let args = RunArgs {
            workload: "count".to_string(),
            exactly_once: true,
            input: self.input.clone(),
            output: self.output.clone(),
            table: format!("{}-unused", self.app_id),
            app_id: self.app_id.clone(),
            state_dir: self
                .a
                .work_dir
                .join("state")
                .join(&self.app_id)
                .join(instance),
            instance_id: None,
            kstreams_props: Vec::new(),
            weir_config: self.a.weir_config.clone(),
        };
        let log = self
            .a
            .work_dir
            .join("logs")
            .join(format!("{}-{instance}.log", self.app_id));
        let system = System {
            kind: self.kind.clone(),
            threads: 1,
            settings: Vec::new(),
        };
        run::spawn(&self.settings(), &system, &args, &log)
    }

    fn measure(&self) -> Result<Outcome> {
        let a = self.a;
        let parts = a.partitions as usize;
        create_topics(&a.bootstrap, &[&self.input, &self.output], a.partitions)?;
        let stop = Arc::new(AtomicBool::new(false));
        let t0 = Instant::now();
        let arrivals = Arc::new(Mutex::new(vec![Vec::new(); parts]));
        let reader = {
            let (bootstrap, topic, stop, arrivals) = (
                a.bootstrap.clone(),
                self.output.clone(),
                stop.clone(),
                arrivals.clone(),
            );
            let partitions = a.partitions;
            std::thread::spawn(move || {
                read_arrivals(&bootstrap, &topic, partitions, t0, &arrivals, &stop)
            })
        };
        let writer = {
            let (bootstrap, topic, stop) = (a.bootstrap.clone(), self.input.clone(), stop.clone());
            let (partitions, rate, keys) = (a.partitions, a.rate, a.keys);
            std::thread::spawn(move || {
                write_at_rate(&bootstrap, &topic, partitions, rate, keys, &stop)
            })
        };
        let mut children = Vec::new();
        let result = (|| -> Result<Outcome> {
            children.push(self.spawn("a")?);
            children.push(self.spawn("b")?);
            // Every partition has output, then the warm-up.
            let deadline = Instant::now() + Duration::from_secs(a.timeout_secs);
            loop {
                let flowing = arrivals.lock().expect("arrivals").iter().all(|v| {
                    v.last()
                        .is_some_and(|&t| t0.elapsed() - t < Duration::from_secs(2))
                });
                if flowing {
                    break;
                }
                for c in &mut children {
                    if let Ok(Some(status)) = c.try_wait() {
                        bail!("an instance exited early ({status})");
                    }
                }
                if Instant::now() > deadline {
                    bail!(
                        "not every partition had output {} s after the start",
                        a.timeout_secs
                    );
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            // Both instances own partitions (the second one's join is a
            // rebalance too: not part of the steady state).
            loop {
                let owners = owners(a, &self.app_id, &self.input)?;
                let mut distinct: Vec<&String> = owners.values().collect();
                distinct.sort();
                distinct.dedup();
                if owners.len() == parts && distinct.len() == 2 {
                    break;
                }
                if Instant::now() > deadline {
                    bail!(
                        "the two instances did not share the partitions within {} s",
                        a.timeout_secs
                    );
                }
                std::thread::sleep(Duration::from_millis(500));
            }
            std::thread::sleep(Duration::from_secs(2));
            let steady_from = t0.elapsed();
            std::thread::sleep(Duration::from_secs(a.warm_secs));
            let before = owners(a, &self.app_id, &self.input)?;
            let scaled = t0.elapsed();
            eprintln!("weir-bench:     owners before: {before:?}; starting the third instance");
            children.push(self.spawn("c")?);
            std::thread::sleep(Duration::from_secs(a.after_secs));
            let end = t0.elapsed();
            let after = owners(a, &self.app_id, &self.input)?;
            eprintln!("weir-bench:     owners after: {after:?}");
            for c in &mut children {
                if let Ok(Some(status)) = c.try_wait() {
                    bail!("an instance exited during the run ({status})");
                }
            }
            let arrivals = arrivals.lock().expect("arrivals");
            let partitions = (0..parts)
                .map(|p| Partition {
                    owner_before: before.get(&(p as i32)).cloned().unwrap_or_default(),
                    owner_after: after.get(&(p as i32)).cloned().unwrap_or_default(),
                    gap_before: longest_gap(&arrivals[p], steady_from, scaled),
                    gap_after: longest_gap(&arrivals[p], scaled, end),
                })
                .collect();
            let mut distinct: Vec<&String> = after.values().collect();
            distinct.sort();
            distinct.dedup();
            Ok(Outcome {
                label: self.label,
                partitions,
                owners_after: distinct.len(),
                error: None,
            })
        })();
        stop.store(true, Ordering::Relaxed);
        for c in &mut children {
            run::stop(c);
        }
        let written = writer.join().expect("writer thread");
        let read = reader.join().expect("reader thread");
        let outcome = result?;
        written.context("writing the input")?;
        read.context("reading the output")?;
        Ok(outcome)
    }
}

/// Runs every system and rewrites the section and its chart.
pub fn run(a: &RebalanceArgs) -> Result<()> {
    for s in &a.systems {
        if s != "weir" && s != "kstreams" {
            bail!("unknown system {s}; use weir or kstreams");
        }
    }
    std::fs::create_dir_all(a.work_dir.join("logs"))?;
    let started = Instant::now();
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs();
    let mut results = Vec::new();
    for (n, s) in a.systems.iter().enumerate() {
        let app_id = format!("rebalance-{stamp}-{n}");
        eprintln!("weir-bench: rebalance 2 → 3 instances, {}", label(s));
        let bench = Bench {
            a,
            label: label(s),
            kind: s.clone(),
            input: format!("{app_id}-in"),
            output: format!("{app_id}-out"),
            app_id: app_id.clone(),
        };
        let outcome = bench.measure().unwrap_or_else(|e| {
            eprintln!("weir-bench:     FAILED: {e:#}");
            Outcome {
                label: label(s),
                partitions: Vec::new(),
                owners_after: 0,
                error: Some(format!("{e:#}")),
            }
        });
        results.push(outcome);
        let _ = delete_topics(
            &a.bootstrap,
            &[&bench.input, &bench.output],
            &format!("{app_id}-"),
        );
        let _ = std::fs::remove_dir_all(a.work_dir.join("state").join(&app_id));
    }
    write_chart(&a.chart, &results)?;
    let text = section(a, &results, started.elapsed());
    crate::sections::write(&a.out, (BEGIN, END), &text)?;
    eprintln!(
        "weir-bench: wrote the rebalance section of {} and {} in {:.0} s",
        a.out.display(),
        a.chart.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn write_chart(path: &Path, results: &[Outcome]) -> Result<()> {
    let groups: Vec<(String, Vec<Bar>)> =
        [(false, "unmoved partitions"), (true, "moved partitions")]
            .iter()
            .map(|&(moved, name)| {
                // A system that moved nothing has no bar here (a failed run
                // has one, marked failed).
                let (with, without): (Vec<&Outcome>, Vec<&Outcome>) = results
                    .iter()
                    .partition(|r| r.error.is_some() || r.max_gap(moved).is_some());
                let bars = with
                    .iter()
                    .map(|r| Bar {
                        label: r.label.to_string(),
                        value: r.max_gap(moved).map(|d| d.as_secs_f64()),
                        colour: if r.label == "Weir" {
                            chart::WEIR
                        } else {
                            chart::KSTREAMS
                        },
                    })
                    .collect();
                let none: Vec<&str> = without.iter().map(|r| r.label).collect();
                let name = if none.is_empty() {
                    name.to_string()
                } else {
                    format!("{name} (none: {})", none.join(", "))
                };
                (name, bars)
            })
            .collect();
    chart::bars(
        path,
        "output gap after scale-out 2 to 3, s (lower is better)",
        &groups,
        |v| format!("{v:.2}"),
    )
}

/// A letter per owner (client id), in the order the owners appear: the
/// owners before the scale-out by partition, then the new ones.
fn instance_names(partitions: &[Partition]) -> BTreeMap<&str, char> {
    let mut names = BTreeMap::new();
    let owners = partitions
        .iter()
        .map(|p| p.owner_before.as_str())
        .chain(partitions.iter().map(|p| p.owner_after.as_str()));
    for owner in owners.filter(|o| !o.is_empty()) {
        let next = (b'A' + names.len() as u8) as char;
        names.entry(owner).or_insert(next);
    }
    names
}

fn section(a: &RebalanceArgs, results: &[Outcome], took: Duration) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{BEGIN}");
    let _ = writeln!(
        s,
        "## Rebalance: scale-out from 2 to 3 instances\n\nRegenerate: `{}` \
         (bench/harness/rebalance.rs); measured separately from the tables above, in \
         {:.0} s. The `count` workload (`exactly_once_v2`, commit interval {} ms, one \
         stream thread per instance, RocksDB store with a changelog) on {} input \
         partitions written at {} records/s in all ({} keys per partition), by two \
         instances; once both own partitions and then after {} s of steady output a third instance starts and the run goes \
         on for {} s. Each system runs with its default group protocol and assignor \
         (Weir: its default `group_protocol`; Kafka Streams {}: classic with its \
         high-availability assignor). *Gap*: the longest time between two consecutive outputs of an input \
         partition visible to a `read_committed` reader (to the run's end when none came \
         after the scale-out). *Moved*: the partition's owner in the group (Kafka's admin \
         client) differs before and after; instances are named A, B, C in the order \
         they own partitions (C started last). JVM options: {}.\n",
        a.command,
        took.as_secs_f64(),
        a.commit_ms,
        a.partitions,
        a.rate,
        a.keys,
        a.warm_secs,
        a.after_secs,
        a.kstreams_version,
        if a.java_opts.is_empty() {
            "JVM defaults".to_string()
        } else {
            a.java_opts.join(" ")
        }
    );
    let _ = writeln!(s, "![rebalance chart](bench/rebalance.png)\n");
    let _ = writeln!(
        s,
        "| system | owners after | moved partitions | longest gap before, s | longest gap after, unmoved s | longest gap after, moved s |"
    );
    let _ = writeln!(s, "| --- | ---: | --- | ---: | ---: | ---: |");
    for r in results {
        if let Some(e) = &r.error {
            let _ = writeln!(
                s,
                "| {} | failed: {} | | | | |",
                r.label,
                e.replace('|', "/")
            );
            continue;
        }
        let moved: Vec<String> = (0..r.partitions.len())
            .filter(|&p| r.partitions[p].moved())
            .map(|p| p.to_string())
            .collect();
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} |",
            r.label,
            r.owners_after,
            if moved.is_empty() {
                "none".to_string()
            } else {
                moved.join(", ")
            },
            secs(r.partitions.iter().map(|p| p.gap_before).max()),
            secs(r.max_gap(false)),
            secs(r.max_gap(true)),
        );
    }
    let weir = results
        .iter()
        .find(|r| r.label == "Weir" && r.error.is_none());
    let ks = results
        .iter()
        .find(|r| r.label == "Kafka Streams" && r.error.is_none());
    if let (Some(w), Some(k)) = (
        weir.and_then(|r| r.max_gap(false)),
        ks.and_then(|r| r.max_gap(false)),
    ) {
        let ratio = w.as_secs_f64() / k.as_secs_f64().max(1e-3);
        let _ = writeln!(
            s,
            "\nTarget: longest gap on unmoved partitions ≤ ½ Kafka Streams': Weir {:.2} s, \
             Kafka Streams {:.2} s, {ratio:.2}× — {}.",
            w.as_secs_f64(),
            k.as_secs_f64(),
            if ratio <= 0.5 { "met" } else { "missed" }
        );
    }
    let _ = writeln!(s, "\nPer partition (gaps in s):\n");
    let _ = writeln!(
        s,
        "| system | partition | moved | gap before | gap after | owner before → after |"
    );
    let _ = writeln!(s, "| --- | ---: | --- | ---: | ---: | --- |");
    for r in results {
        let names = instance_names(&r.partitions);
        let name = |client: &str| names.get(client).copied().unwrap_or('?');
        for (n, p) in r.partitions.iter().enumerate() {
            let _ = writeln!(
                s,
                "| {} | {n} | {} | {:.2} | {:.2} | {} → {} |",
                r.label,
                if p.moved() { "yes" } else { "no" },
                p.gap_before.as_secs_f64(),
                p.gap_after.as_secs_f64(),
                name(&p.owner_before),
                name(&p.owner_after)
            );
        }
    }
    let _ = writeln!(s, "{END}");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_gap_counts_the_edges_of_the_window() {
        let ms = Duration::from_millis;
        let a = [ms(100), ms(200), ms(900), ms(1000)];
        assert_eq!(longest_gap(&a, ms(0), ms(1000)), ms(700));
        assert_eq!(longest_gap(&a, ms(950), ms(3000)), ms(2000));
        assert_eq!(longest_gap(&[], ms(0), ms(500)), ms(500));
    }

    #[test]
    fn owners_are_lettered_in_the_order_they_appear() {
        let p = |before: &str, after: &str| Partition {
            owner_before: before.into(),
            owner_after: after.into(),
            gap_before: Duration::ZERO,
            gap_after: Duration::ZERO,
        };
        let partitions = [p("y", "y"), p("x", "z"), p("y", "")];
        let names = instance_names(&partitions);
        assert_eq!(names.get("y"), Some(&'A'));
        assert_eq!(names.get("x"), Some(&'B'));
        assert_eq!(names.get("z"), Some(&'C'));
        assert_eq!(names.get(""), None);
    }

    #[test]
    fn an_output_key_names_its_input_partition() {
        assert_eq!(partition_of(b"p3-17"), Some(3));
        assert_eq!(partition_of(b"x3-17"), None);
    }
}
