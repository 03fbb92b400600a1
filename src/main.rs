//! `weir`: run, describe and feed the topologies that ship with Weir.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand, ValueEnum};
use weir::config::{Origin, Settings};
use weir::runtime::{AppState, KafkaStreams};

// mimalloc rather than glibc's malloc, also for librdkafka and RocksDB
// (the feature's `override`): 14-37% less CPU per record in the
// benchmarks, for 40-90 MiB more peak RSS (bench/NOTES.md, *Allocator*).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

// The binary's own module: the library does not export its CLI helpers.
#[path = "cli/tools.rs"]
mod tools;

/// Weir: Kafka Streams for Rust.
#[derive(Parser)]
#[command(version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List the topologies that ship with Weir.
    List,
    /// Describe a shipped topology (sub-topologies, stores, topics).
    Describe {
        /// The topology's name (see `weir list`).
        topology: String,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
    /// Run a shipped topology until SIGTERM/SIGINT.
    Run {
        /// The topology's name (see `weir list`).
        topology: String,
        /// A TOML file of settings (`application_id = "..."`, `[kafka]` table for librdkafka options, ...).
        #[arg(long)]
        config: Option<PathBuf>,
        /// A setting `key=value`; wins over the file and WEIR_* environment variables.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
    },
    /// Write sample input for a shipped topology (creating its topics when missing).
    Generate {
        /// The topology's name (see `weir list`).
        topology: String,
        /// Records to write (default: 10000, or one complete dataset for a
        /// topology with a ground truth).
        #[arg(long)]
        count: Option<u64>,
        /// Records per second; 0 writes as fast as possible.
        #[arg(long, default_value_t = 0)]
        rate: u64,
        /// Index of the first record (to continue an earlier run).
        #[arg(long, default_value_t = 0)]
        start: u64,
        /// Partitions of topics created here.
        #[arg(long, default_value_t = 4)]
        partitions: i32,
        #[command(flatten)]
        broker: BrokerArgs,
        /// A topology parameter `topology.<param>=value` (topic names).
        #[arg(long = "set", value_name = "topology.PARAM=VALUE")]
        set: Vec<String>,
        /// Write the ground truth (what was injected where, JSON) to this
        /// file; for topologies whose samples carry injected anomalies.
        #[arg(long)]
        truth: Option<PathBuf>,
    },
    /// Reset an application: refuse while it runs; delete its consumer group
    /// (inputs are read again from the earliest offset), its changelog and
    /// repartition topics, and its local state.
    Reset {
        /// The application to reset (its consumer group id).
        #[arg(long)]
        application_id: String,
        #[command(flatten)]
        broker: BrokerArgs,
        /// The state directory the instances on this machine used.
        #[arg(long, env = "WEIR_STATE_DIR", default_value = "/tmp/weir")]
        state_dir: PathBuf,
    },
    /// Ask a running application for a key of one of its stores (or its
    /// windows, or the whole store without a key): finds an instance
    /// through the consumer group and prints its JSON answer.
    Query {
        /// The store (see `/stores` or `weir describe`).
        store: String,
        /// The key, as text (a number for integer keys, JSON for JSON
        /// keys); without one, every entry of a key-value store.
        key: Option<String>,
        /// The application (its consumer group id).
        #[arg(long)]
        application_id: String,
        #[command(flatten)]
        broker: BrokerArgs,
        /// Ask for the key's windows (window store) or sessions (session store).
        #[arg(long)]
        windows: bool,
        /// With --windows: the earliest window start, ms since the epoch.
        #[arg(long, requires = "windows")]
        from: Option<i64>,
        /// With --windows: the latest window start, ms since the epoch.
        #[arg(long, requires = "windows")]
        to: Option<i64>,
    },
    /// Print the latest value per key of a topic (read_committed), as `key<TAB>value`.
    Table {
        /// The topic.
        topic: String,
        /// How to print values.
        #[arg(long, value_enum, default_value_t = ValueFormat::String)]
        value: ValueFormat,
        #[command(flatten)]
        broker: BrokerArgs,
    },
}

/// The broker a tool connects to.
#[derive(clap::Args)]
struct BrokerArgs {
    /// Kafka bootstrap servers.
    #[arg(long, env = "WEIR_BOOTSTRAP_SERVERS", default_value = "127.0.0.1:9092")]
    bootstrap_servers: String,
    /// A librdkafka option for every client of the tool, e.g.
    /// `--kafka security.protocol=SASL_SSL` (`kafka.` prefix optional, so
    /// `weir run`'s settings can be reused).
    #[arg(long = "kafka", value_name = "OPTION=VALUE")]
    kafka: Vec<String>,
}

impl BrokerArgs {
    fn connection(&self) -> Result<weir::config::Connection> {
        Ok(weir::config::Connection::with_options(
            &self.bootstrap_servers,
            &self.kafka,
        )?)
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Text,
    Mermaid,
}

#[derive(Clone, Copy, ValueEnum)]
enum ValueFormat {
    String,
    I64,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    weir::telemetry::init_logging();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("weir: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn shipped(name: &str) -> Result<&'static weir::topologies::ShippedTopology> {
    weir::topologies::find(name).with_context(|| {
        let names: Vec<&str> = weir::topologies::ALL.iter().map(|t| t.name).collect();
        format!(
            "no topology named '{name}'; shipped topologies: {}",
            names.join(", ")
        )
    })
}

fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::List => {
            for t in weir::topologies::ALL {
                println!("{:<16} {}", t.name, t.description);
            }
        }
        Command::Describe { topology, format } => {
            let t = shipped(&topology)?;
            let params = t.params(&BTreeMap::new())?;
            let built = (t.build)(&params)?;
            match format {
                Format::Text => {
                    println!("# {}: {}", t.name, t.description);
                    for p in t.params {
                        println!("# topology.{} (default {}): {}", p.name, p.default, p.doc);
                    }
                    print!("{}", built.describe());
                }
                Format::Mermaid => print!("{}", built.describe().to_mermaid()),
            }
        }
        Command::Run {
            topology,
            config,
            set,
        } => {
            let t = shipped(&topology)?;
            let config = settings(t.name, config.as_deref(), &set)?.into_config()?;
            let params = t.params(&config.topology_params)?;
            let mut app = KafkaStreams::new((t.build)(&params)?, config)?;
            return run_until_signal(&mut app);
        }
        Command::Generate {
            topology,
            count,
            rate,
            start,
            partitions,
            broker,
            set,
            truth,
        } => {
            let connection = broker.connection()?;
            let t = shipped(&topology)?;
            if truth.is_some() && t.dataset.is_none() {
                bail!("--truth: {} has no injected anomalies to write", t.name);
            }
            let count = count.unwrap_or_else(|| t.dataset.map_or(10_000, |d| (d.len)()));
            let mut given = BTreeMap::new();
            for s in &set {
                let (k, v) = s
                    .split_once('=')
                    .with_context(|| format!("--set '{s}': expected key=value"))?;
                let k = k.trim().strip_prefix("topology.").with_context(|| {
                    format!("--set '{s}': generate takes topology.<param> settings")
                })?;
                given.insert(k.to_string(), v.trim().to_string());
            }
            let params = t.params(&given)?;
            let inputs = t.input_topics(&params);
            let mut topics = inputs.clone();
            topics.extend(t.output_topics(&params));
            let refs: Vec<&str> = topics.iter().map(String::as_str).collect();
            tools::ensure_topics(&connection, &refs, partitions)?;
            // A dataset's event times end now (see `shift_to_end_at`).
            let shift = t.dataset.map_or(0, |d| {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as i64);
                (d.shift_to_end_at)(now, start, count)
            });
            if let (Some(path), Some(dataset)) = (&truth, t.dataset) {
                let json = serde_json::to_string_pretty(&(dataset.truth)(start, count, shift))?;
                std::fs::write(path, json + "\n")
                    .with_context(|| format!("--truth: writing {}", path.display()))?;
            }
            let input_of = t.dataset.map(|d| d.input_of);
            let sample = |i| match t.dataset {
                Some(d) => (d.sample_at)(i, shift),
                None => (t.sample)(i),
            };
            let samples = tools::Samples {
                sample: &sample,
                input_of,
                start,
                count,
                rate,
            };
            let written = tools::generate(&connection, &inputs, &samples)?;
            eprintln!("weir: wrote {written} records to {}", inputs.join(", "));
        }
        Command::Reset {
            application_id,
            broker,
            state_dir,
        } => {
            let report = weir::reset::reset(&broker.connection()?, &application_id, &state_dir)?;
            eprintln!(
                "weir: reset {application_id}: consumer group {}; deleted topics: {}; local state {}",
                if report.group_deleted {
                    "deleted (inputs restart from the earliest offset)"
                } else {
                    "did not exist"
                },
                if report.deleted_topics.is_empty() {
                    "none".to_string()
                } else {
                    report.deleted_topics.join(", ")
                },
                match &report.removed_state_dir {
                    Some(dir) => format!("{} removed", dir.display()),
                    None => format!("absent under {}", state_dir.display()),
                }
            );
        }
        Command::Query {
            store,
            key,
            application_id,
            broker,
            windows,
            from,
            to,
        } => {
            let path = weir::runtime::query_path(&store, key.as_deref(), windows, from, to);
            let (endpoint, status, body) =
                weir::runtime::query_application(&broker.connection()?, &application_id, &path)
                    .map_err(|e| anyhow::anyhow!("weir query: {e}"))?;
            println!("{}", body.trim_end());
            if status != 200 {
                eprintln!("weir query: {endpoint} answered {status} for {path}");
                return Ok(ExitCode::FAILURE);
            }
        }
        Command::Table {
            topic,
            value,
            broker,
        } => {
            for (k, v) in tools::latest_per_key(&broker.connection()?, &topic)? {
                let key = String::from_utf8_lossy(&k);
                let value = match (value, v) {
                    (_, None) => "null".to_string(),
                    (ValueFormat::String, Some(v)) => String::from_utf8_lossy(&v).into_owned(),
                    (ValueFormat::I64, Some(v)) => match <[u8; 8]>::try_from(v.as_slice()) {
                        Ok(b) => i64::from_be_bytes(b).to_string(),
                        Err(_) => format!("<{} bytes>", v.len()),
                    },
                };
                println!("{key}\t{value}");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Settings in increasing precedence: defaults, the file, `WEIR_*` variables, `--set`.
fn settings(topology: &str, file: Option<&std::path::Path>, set: &[String]) -> Result<Settings> {
    let mut settings = Settings::default();
    settings.insert(
        "application_id",
        format!("weir-{topology}"),
        Origin::Default,
    );
    settings.insert("bootstrap_servers", "127.0.0.1:9092", Origin::Default);
    settings.insert("http_bind", "127.0.0.1:9190", Origin::Default);
    if let Some(path) = file {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading config file {}", path.display()))?;
        let table: toml::Table = text
            .parse()
            .with_context(|| format!("parsing config file {}", path.display()))?;
        let mut pairs = BTreeMap::new();
        flatten("", &toml::Value::Table(table), &mut pairs)?;
        for (key, value) in pairs {
            settings.insert(key, value, Origin::File(path.to_path_buf()));
        }
    }
    settings.add_environment(std::env::vars());
    for s in set {
        let Some((k, v)) = s.split_once('=') else {
            bail!("--set '{s}': expected key=value");
        };
        settings.insert(k.trim(), v.trim(), Origin::CommandLine);
    }
    Ok(settings)
}

fn flatten(prefix: &str, value: &toml::Value, out: &mut BTreeMap<String, String>) -> Result<()> {
    match value {
        toml::Value::Table(t) => {
            for (k, v) in t {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, out)?;
            }
        }
        toml::Value::String(s) => {
            out.insert(prefix.to_string(), s.clone());
        }
        toml::Value::Integer(i) => {
            out.insert(prefix.to_string(), i.to_string());
        }
        toml::Value::Float(f) => {
            out.insert(prefix.to_string(), f.to_string());
        }
        toml::Value::Boolean(b) => {
            out.insert(prefix.to_string(), b.to_string());
        }
        other => bail!("config key '{prefix}': unsupported value {other}"),
    }
    Ok(())
}

fn run_until_signal(app: &mut KafkaStreams) -> Result<ExitCode> {
    app.start()?;
    if let Some(addr) = app.http_addr() {
        eprintln!(
            "weir: metrics at http://{addr}/metrics (health: /health/ready, topology: /topology)"
        );
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let stopped_by_signal = runtime.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        let mut interval = tokio::time::interval(Duration::from_millis(100));
        loop {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => return Ok::<bool, std::io::Error>(true),
                _ = term.recv() => return Ok(true),
                _ = interval.tick() => {
                    if matches!(app.state(), AppState::Error | AppState::PendingError) {
                        return Ok(false);
                    }
                }
            }
        }
    })?;
    if stopped_by_signal {
        eprintln!("weir: shutting down (commit, close tasks, leave the group)");
    }
    let closed = app.close(Duration::from_secs(60));
    if let Some(error) = app.error() {
        eprintln!("weir: error: {error}");
        return Ok(ExitCode::FAILURE);
    }
    if !closed {
        bail!("stream threads did not stop within 60 s");
    }
    Ok(ExitCode::SUCCESS)
}
