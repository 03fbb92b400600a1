//! `weir-bench`: Weir against Kafka Streams and a raw rdkafka loop on the
//! local broker. `scripts/bench` builds everything and runs `weir-bench
//! report`, which runs every workload × guarantee × system (each system as a
//! child process: `weir-bench weir …`, `weir-bench raw …`, or the JVM of
//! bench/kafka-streams) and regenerates BENCHMARKS.md and its chart.

// The Weir child runs with the allocator the `weir` binary uses (the
// `mimalloc` feature, on by default; see src/main.rs).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod ceiling;
mod chart;
mod dcmon;
mod procstat;
mod queries;
mod raw;
mod rebalance;
mod report;
mod restore;
mod run;
mod sections;
mod topologies;
mod workload;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use weir::config::{ProcessingGuarantee, StreamsConfig};
use weir::runtime::{AppState, KafkaStreams};

#[derive(Parser)]
#[command(about = "Benchmarks Weir against Kafka Streams and a raw rdkafka loop")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run every workload on every system and write BENCHMARKS.md and the chart.
    Report(ReportArgs),
    /// Run one workload with Weir until SIGTERM (a child of `report`).
    Weir(ChildArgs),
    /// Run one workload as a raw rdkafka loop until SIGTERM (a child of `report`).
    Raw(ChildArgs),
    /// Throughput of the shipped datacenter-monitor application (rewrites
    /// its section of BENCHMARKS.md).
    Dcmon(DcmonCli),
    /// Interactive query speed: local `get` latency and routed HTTP
    /// queries per second (rewrites its section of BENCHMARKS.md).
    Queries(QueriesCli),
    /// Restart after a SIGKILL with a large store, local state kept and
    /// wiped, Weir against Kafka Streams (rewrites its section of
    /// BENCHMARKS.md and bench/restore.png).
    Restore(RestoreCli),
    /// Scale-out from 2 to 3 instances at a fixed input rate: the longest
    /// output gap per input partition, moved and unmoved, Weir against
    /// Kafka Streams (rewrites its section of BENCHMARKS.md and
    /// bench/rebalance.png).
    Rebalance(RebalanceCli),
}

#[derive(Args)]
struct RebalanceCli {
    #[arg(long, env = "BENCH_BOOTSTRAP", default_value = "127.0.0.1:29392")]
    bootstrap: String,
    #[arg(long, env = "BENCH_REBALANCE_PARTITIONS", default_value_t = 6)]
    partitions: i32,
    /// Input records per second, all partitions together.
    #[arg(long, env = "BENCH_REBALANCE_RATE", default_value_t = 3000)]
    rate: u64,
    /// Distinct keys per input partition.
    #[arg(long, default_value_t = 1000)]
    keys: u64,
    #[arg(long, env = "BENCH_COMMIT_MS", default_value_t = 100)]
    commit_ms: u64,
    /// Seconds of steady output before the third instance starts.
    #[arg(long, default_value_t = 20)]
    warm_secs: u64,
    /// Seconds the run goes on after the third instance starts.
    #[arg(long, env = "BENCH_REBALANCE_SECS", default_value_t = 60)]
    after_secs: u64,
    /// Systems: weir, kstreams.
    #[arg(long, value_delimiter = ',', default_value = "weir,kstreams")]
    systems: Vec<String>,
    #[arg(long, default_value = "bench/kafka-streams")]
    kstreams_dir: PathBuf,
    /// The Kafka Streams version built (for the report).
    #[arg(long, env = "BENCH_KSTREAMS_VERSION", default_value = "4.4.0")]
    kstreams_version: String,
    #[arg(long, env = "BENCH_JAVA_OPTS", default_value = "")]
    java_opts: String,
    /// Longest the start may take.
    #[arg(long, env = "BENCH_TIMEOUT_SECS", default_value_t = 120)]
    timeout_secs: u64,
    #[arg(long, default_value = "/tmp/weir-bench-rebalance")]
    work_dir: PathBuf,
    #[arg(long, default_value = "BENCHMARKS.md")]
    out: PathBuf,
    #[arg(long, default_value = "bench/rebalance.png")]
    chart: PathBuf,
    /// A Weir setting for its instances, `KEY=VALUE` (repeatable), e.g.
    /// `group_protocol=classic`.
    #[arg(long = "weir-set")]
    weir_config: Vec<String>,
    #[arg(long, env = "BENCH_COMMAND", default_value = "scripts/bench rebalance")]
    command: String,
}

#[derive(Args)]
struct RestoreCli {
    #[arg(long, env = "BENCH_BOOTSTRAP", default_value = "127.0.0.1:29392")]
    bootstrap: String,
    /// Store sizes: distinct keys counted before the kill.
    #[arg(
        long,
        env = "BENCH_RESTORE_KEYS",
        value_delimiter = ',',
        default_value = "1000000,10000000"
    )]
    keys: Vec<u64>,
    #[arg(long, env = "BENCH_PARTITIONS", default_value_t = 4)]
    partitions: i32,
    #[arg(long, env = "BENCH_COMMIT_MS", default_value_t = 100)]
    commit_ms: u64,
    /// Systems: weir, kstreams, kstreams-tx (transactional state stores).
    #[arg(
        long,
        env = "BENCH_RESTORE_SYSTEMS",
        value_delimiter = ',',
        default_value = "weir,kstreams,kstreams-tx"
    )]
    systems: Vec<String>,
    #[arg(long, default_value = "bench/kafka-streams")]
    kstreams_dir: PathBuf,
    /// The Kafka Streams version built (for the report).
    #[arg(long, env = "BENCH_KSTREAMS_VERSION", default_value = "4.4.0")]
    kstreams_version: String,
    #[arg(long, env = "BENCH_JAVA_OPTS", default_value = "")]
    java_opts: String,
    /// Longest any one wait may take.
    #[arg(long, env = "BENCH_TIMEOUT_SECS", default_value_t = 600)]
    timeout_secs: u64,
    #[arg(long, default_value = "/tmp/weir-bench-restore")]
    work_dir: PathBuf,
    #[arg(long, default_value = "BENCHMARKS.md")]
    out: PathBuf,
    #[arg(long, default_value = "bench/restore.png")]
    chart: PathBuf,
    #[arg(long, env = "BENCH_COMMAND", default_value = "scripts/bench restore")]
    command: String,
}

#[derive(Args)]
struct QueriesCli {
    #[arg(long, env = "BENCH_BOOTSTRAP", default_value = "127.0.0.1:29392")]
    bootstrap: String,
    /// Keys in the store (one count each).
    #[arg(long, env = "BENCH_QUERY_KEYS", default_value_t = 100_000)]
    keys: u64,
    #[arg(long, env = "BENCH_PARTITIONS", default_value_t = 4)]
    partitions: i32,
    /// Seconds of each HTTP phase.
    #[arg(long, env = "BENCH_QUERY_SECS", default_value_t = 10)]
    seconds: u64,
    /// Concurrent HTTP clients.
    #[arg(long, env = "BENCH_QUERY_CLIENTS", default_value_t = 4)]
    clients: usize,
    /// Library gets measured one at a time.
    #[arg(long, default_value_t = 2_000)]
    gets: usize,
    #[arg(long)]
    work_dir: PathBuf,
    /// The report to rewrite the section of.
    #[arg(long, default_value = "BENCHMARKS.md")]
    out: PathBuf,
    /// The command shown as how to regenerate the section.
    #[arg(long, env = "BENCH_COMMAND", default_value = "scripts/bench queries")]
    command: String,
}

#[derive(Args)]
struct DcmonCli {
    #[arg(long, env = "BENCH_BOOTSTRAP", default_value = "127.0.0.1:29392")]
    bootstrap: String,
    /// Repetitions of the generated dataset to load.
    #[arg(long, env = "BENCH_DCMON_REPETITIONS", default_value_t = 8)]
    repetitions: u64,
    #[arg(long, env = "BENCH_PARTITIONS", default_value_t = 4)]
    partitions: i32,
    #[arg(long, env = "BENCH_COMMIT_MS", default_value_t = 100)]
    commit_ms: u64,
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "at_least_once,exactly_once_v2"
    )]
    guarantees: Vec<String>,
    /// Stream thread counts to run.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    threads: Vec<usize>,
    #[arg(long, default_value = "/tmp/weir-bench-dcmon")]
    work_dir: PathBuf,
    #[arg(long, default_value = "BENCHMARKS.md")]
    out: PathBuf,
    /// The command line to print in the report.
    #[arg(long, env = "BENCH_COMMAND", default_value = "scripts/bench dcmon")]
    command: String,
}

#[derive(Args)]
struct ReportArgs {
    #[arg(long, env = "BENCH_BOOTSTRAP", default_value = "127.0.0.1:29392")]
    bootstrap: String,
    /// Measured input records per run.
    #[arg(long, env = "BENCH_RECORDS", default_value_t = 5_000_000)]
    records: u64,
    /// Input records before the measured ones, processed but not counted
    /// (start-up, rebalance and JIT warm-up).
    #[arg(long, env = "BENCH_WARMUP_RECORDS", default_value_t = 1_000_000)]
    warmup_records: u64,
    /// Runs of every system per workload and guarantee (median reported).
    #[arg(long, env = "BENCH_REPEAT", default_value_t = 3)]
    repeat: usize,
    /// Distinct keys.
    #[arg(long, env = "BENCH_KEYS", default_value_t = 10_000)]
    keys: u64,
    /// Bytes per JSON value.
    #[arg(long, env = "BENCH_VALUE_BYTES", default_value_t = 200)]
    value_bytes: usize,
    #[arg(long, env = "BENCH_PARTITIONS", default_value_t = 4)]
    partitions: i32,
    /// Commit interval of every system, both guarantees.
    #[arg(long, env = "BENCH_COMMIT_MS", default_value_t = 100)]
    commit_ms: u64,
    /// Input rate of the latency phase (records/s).
    #[arg(long, env = "BENCH_LATENCY_RATE", default_value_t = 1_000)]
    latency_rate: u64,
    #[arg(long, env = "BENCH_LATENCY_SECS", default_value_t = 6)]
    latency_secs: u64,
    /// Longest a throughput phase may take.
    #[arg(long, env = "BENCH_TIMEOUT_SECS", default_value_t = 300)]
    timeout_secs: u64,
    /// Systems: weir[:threads][+KEY=VALUE...] (a Weir variant with settings), raw, kstreams[:threads].
    #[arg(
        long,
        env = "BENCH_SYSTEMS",
        value_delimiter = ',',
        default_value = "raw,weir:1,weir:2,kstreams:1,kstreams:2"
    )]
    systems: Vec<String>,
    #[arg(
        long,
        env = "BENCH_WORKLOADS",
        value_delimiter = ',',
        default_value = "passthrough,stateless,count,window,join"
    )]
    workloads: Vec<String>,
    #[arg(
        long,
        env = "BENCH_GUARANTEES",
        value_delimiter = ',',
        default_value = "at_least_once,exactly_once_v2"
    )]
    guarantees: Vec<String>,
    /// The Maven project of the Kafka Streams side (built).
    #[arg(long, default_value = "bench/kafka-streams")]
    kstreams_dir: PathBuf,
    /// JVM options for Kafka Streams (space-separated; empty: JVM defaults).
    #[arg(long, env = "BENCH_JAVA_OPTS", default_value = "")]
    java_opts: String,
    /// Scratch directory: state, logs, results.json.
    #[arg(long, default_value = "/tmp/weir-bench")]
    work_dir: PathBuf,
    /// The report to write.
    #[arg(long, default_value = "BENCHMARKS.md")]
    out: PathBuf,
    /// The chart to write.
    #[arg(long, default_value = "bench/throughput.png")]
    chart: PathBuf,
    /// The command line to print in the report.
    #[arg(long, env = "BENCH_COMMAND", default_value = "scripts/bench")]
    command: String,
}

#[derive(Args)]
struct ChildArgs {
    #[arg(long)]
    workload: String,
    #[arg(long)]
    guarantee: String,
    #[arg(long, default_value_t = 1)]
    threads: usize,
    #[arg(long)]
    commit_ms: u64,
    #[arg(long)]
    input: String,
    #[arg(long)]
    output: String,
    /// The join workload's table topic.
    #[arg(long)]
    table: String,
    #[arg(long)]
    app_id: String,
    #[arg(long)]
    bootstrap: String,
    #[arg(long)]
    state_dir: PathBuf,
    /// Static membership: Weir's `instance_id`.
    #[arg(long)]
    instance_id: Option<String>,
    /// Further Weir settings, `KEY=VALUE` (as in a config file).
    #[arg(long = "set")]
    settings: Vec<String>,
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Cmd::Report(a) => report_cmd(a),
        Cmd::Weir(a) => weir_cmd(a),
        Cmd::Raw(a) => raw_cmd(a),
        Cmd::Queries(a) => queries::run(&queries::QueriesArgs {
            bootstrap: a.bootstrap,
            keys: a.keys,
            partitions: a.partitions,
            seconds: a.seconds,
            clients: a.clients,
            gets: a.gets,
            work_dir: a.work_dir,
            out: a.out,
            command: a.command,
        }),
        Cmd::Restore(a) => restore::run(&restore::RestoreArgs {
            bootstrap: a.bootstrap,
            keys: a.keys,
            partitions: a.partitions,
            commit_ms: a.commit_ms,
            systems: a.systems,
            kstreams_dir: a.kstreams_dir,
            kstreams_version: a.kstreams_version,
            java_opts: a.java_opts.split_whitespace().map(str::to_string).collect(),
            timeout_secs: a.timeout_secs,
            work_dir: a.work_dir,
            out: a.out,
            chart: a.chart,
            command: a.command,
        }),
        Cmd::Rebalance(a) => rebalance::run(&rebalance::RebalanceArgs {
            bootstrap: a.bootstrap,
            partitions: a.partitions,
            rate: a.rate,
            keys: a.keys,
            commit_ms: a.commit_ms,
            warm_secs: a.warm_secs,
            after_secs: a.after_secs,
            systems: a.systems,
            kstreams_dir: a.kstreams_dir,
            kstreams_version: a.kstreams_version,
            java_opts: a.java_opts.split_whitespace().map(str::to_string).collect(),
            timeout_secs: a.timeout_secs,
            work_dir: a.work_dir,
            out: a.out,
            chart: a.chart,
            weir_config: a
                .weir_config
                .iter()
                .map(|kv| {
                    kv.split_once('=')
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .ok_or_else(|| anyhow::anyhow!("--weir-set wants KEY=VALUE, got {kv}"))
                })
                .collect::<Result<_>>()?,
            command: a.command,
        }),
        Cmd::Dcmon(a) => dcmon::run(&dcmon::DcmonArgs {
            bootstrap: a.bootstrap,
            repetitions: a.repetitions,
            partitions: a.partitions,
            commit_ms: a.commit_ms,
            guarantees: a.guarantees,
            threads: a.threads,
            work_dir: a.work_dir,
            out: a.out,
            command: a.command,
        }),
    }
}

/// Sets the returned flag on SIGTERM or SIGINT.
fn stop_on_signal() -> Result<Arc<AtomicBool>> {
    let flag = Arc::new(AtomicBool::new(false));
    let f = flag.clone();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    std::thread::spawn(move || {
        runtime.block_on(async {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .expect("SIGTERM handler");
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        });
        f.store(true, Ordering::SeqCst);
    });
    Ok(flag)
}

fn weir_cmd(a: ChildArgs) -> Result<()> {
    weir::telemetry::init_logging();
    tracing::debug!("weir-bench child started");
    let stop = stop_on_signal()?;
    let mut config = StreamsConfig::new(&a.app_id, &a.bootstrap);
    config.processing_guarantee = a
        .guarantee
        .parse::<ProcessingGuarantee>()
        .map_err(anyhow::Error::msg)?;
    config.num_stream_threads = a.threads;
    config.commit_interval_ms = Some(a.commit_ms);
    config.state_dir = a.state_dir.clone();
    config.instance_id = a.instance_id.clone();
    for pair in &a.settings {
        let (k, v) = pair
            .split_once('=')
            .with_context(|| format!("--set {pair}: expected KEY=VALUE"))?;
        config.set(k, v)?;
    }
    let topology = topologies::build(&a.workload, &a.input, &a.output, &a.table)?;
    let mut app = KafkaStreams::new(topology, config)?;
    app.start()?;
    while !stop.load(Ordering::SeqCst) {
        if matches!(app.state(), AppState::Error | AppState::PendingError) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    app.close(Duration::from_secs(30));
    if let Some(e) = app.error() {
        bail!("weir failed: {e}");
    }
    Ok(())
}

fn raw_cmd(a: ChildArgs) -> Result<()> {
    let stop = stop_on_signal()?;
    raw::run(
        &raw::RawArgs {
            exactly_once: a.guarantee == "exactly_once_v2",
            workload: a.workload,
            commit_ms: a.commit_ms,
            input: a.input,
            output: a.output,
            table: a.table,
            app_id: a.app_id,
            bootstrap: a.bootstrap,
        },
        stop,
    )
}

fn report_cmd(a: ReportArgs) -> Result<()> {
    let systems = a
        .systems
        .iter()
        .map(|s| run::System::parse(s))
        .collect::<Result<Vec<_>>>()?;
    for w in &a.workloads {
        if !workload::WORKLOADS.contains(&w.as_str()) {
            bail!("unknown workload {w}; use {:?}", workload::WORKLOADS);
        }
    }
    for g in &a.guarantees {
        if g != "at_least_once" && g != "exactly_once_v2" {
            bail!("unknown guarantee {g}");
        }
    }
    let settings = run::Settings {
        bootstrap: a.bootstrap.clone(),
        records: a.records,
        warmup_records: a.warmup_records,
        keys: a.keys,
        value_bytes: a.value_bytes,
        partitions: a.partitions,
        commit_ms: a.commit_ms,
        latency_rate: a.latency_rate,
        latency_secs: a.latency_secs,
        timeout_secs: a.timeout_secs,
        kstreams_dir: a.kstreams_dir.clone(),
        java_opts: a.java_opts.split_whitespace().map(str::to_string).collect(),
        work_dir: a.work_dir.clone(),
    };
    std::fs::create_dir_all(&a.work_dir).context("creating the work directory")?;
    let started = std::time::Instant::now();
    let load_before = procstat::load_average();
    let mut outcomes = Vec::new();
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs();
    // The broker-only ceiling, measured in the same run as the systems.
    eprintln!("weir-bench: broker-only ceiling (produce-only, consume-only)");
    let ceiling = match ceiling::measure(&settings, &format!("{stamp}-0")) {
        Ok(c) => {
            eprintln!(
                "weir-bench:     produce {:.0} rec/s, consume {:.0} rec/s",
                c.produce, c.consume
            );
            Some(c)
        }
        Err(e) => {
            eprintln!("weir-bench:     FAILED: {e:#}");
            None
        }
    };
    let mut n = 0;
    for workload in &a.workloads {
        for guarantee in &a.guarantees {
            // Systems side by side for each workload and guarantee, the
            // repetitions interleaved so that each system sees the same
            // spread of machine load.
            let mut runs: Vec<Vec<run::Outcome>> = vec![Vec::new(); systems.len()];
            for rep in 1..=a.repeat.max(1) {
                for (system, runs) in systems.iter().zip(runs.iter_mut()) {
                    n += 1;
                    let run_id = format!("{stamp}-{n}");
                    eprintln!(
                        "weir-bench: [{n}] {workload} {guarantee} {} run {rep} (load {})",
                        system.label(),
                        procstat::load_average()
                    );
                    let o = run::run(
                        &settings,
                        system,
                        workload,
                        guarantee == "exactly_once_v2",
                        &run_id,
                    );
                    match &o.error {
                        Some(e) => eprintln!("weir-bench:     FAILED: {e}"),
                        None => eprintln!(
                            "weir-bench:     {:.0} rec/s over {:.1} s, p50 {:?} ms, p99 {:?} ms, rss {} MiB, {:.2} cpu-s/M",
                            o.throughput,
                            o.seconds,
                            o.p50_ms,
                            o.p99_ms,
                            o.peak_rss_bytes >> 20,
                            o.cpu_s_per_m
                        ),
                    }
                    runs.push(o);
                }
            }
            outcomes.extend(runs.into_iter().map(run::Outcome::median_of));
        }
    }
    let load_after = procstat::load_average();
    let ctx = report::Context {
        settings: &settings,
        systems: &systems,
        command: &a.command,
        load_before,
        load_after,
        elapsed: started.elapsed(),
        chart: &a.chart,
        out: &a.out,
        ceiling,
        repeat: a.repeat.max(1),
    };
    report::write(&ctx, &outcomes)?;
    chart::write(&a.chart, &outcomes, ceiling)?;
    eprintln!(
        "weir-bench: wrote {} and {} in {:.0} s",
        a.out.display(),
        a.chart.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
