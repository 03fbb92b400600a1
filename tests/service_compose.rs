//! The compose stack, checked without a Docker engine: `docker-compose.yml`
//! and the Prometheus/Grafana provisioning files are parsed with a real YAML
//! parser (Python's PyYAML, through `python3`; install `python3-yaml` if
//! missing), and what they refer to must exist and agree: mounted paths,
//! the Dockerfile's inputs, the HTTP port Prometheus scrapes, the dashboard
//! directory Grafana loads, the datasource uid the dashboards use, the
//! topology and topics the services run.
//!
//! `docker compose config` (the compose plugin) and `docker build` cannot
//! run on a machine without them. Instead, `deploy/compose-config` loads the
//! file with compose-go, the library `docker compose config` itself uses
//! (schema validation, interpolation, normalization), when Go is installed.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Parses a YAML file into JSON with PyYAML's `safe_load` (merge keys included).
fn yaml(path: &Path) -> Value {
    let output = Command::new("python3")
        .args([
            "-c",
            "import json, sys, yaml; print(json.dumps(yaml.safe_load(open(sys.argv[1]))))",
        ])
        .arg(path)
        .output()
        .expect("running python3 (install python3 and python3-yaml)");
    assert!(
        output.status.success(),
        "parsing {} failed: {}",
        path.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// The port of `WEIR_HTTP_BIND=<ip>:<port>` in the Dockerfile.
fn image_http_port(dockerfile: &str) -> u16 {
    dockerfile
        .split_whitespace()
        .find_map(|w| w.strip_prefix("WEIR_HTTP_BIND="))
        .and_then(|bind| bind.rsplit_once(':'))
        .and_then(|(_, port)| port.parse().ok())
        .expect("the Dockerfile sets WEIR_HTTP_BIND=<ip>:<port>")
}

/// Compose's interpolation of `${NAME:-default}` and `${NAME}` in every
/// string, with `env` as the environment.
fn interpolate(value: &Value, env: &[(&str, &str)]) -> Value {
    match value {
        Value::String(s) => {
            let mut out = String::new();
            let mut rest = s.as_str();
            while let Some(at) = rest.find("${") {
                out.push_str(&rest[..at]);
                let end = rest[at..].find('}').expect("closed ${") + at;
                let (name, default) = rest[at + 2..end]
                    .split_once(":-")
                    .unwrap_or((&rest[at + 2..end], ""));
                let given = env.iter().find(|(k, _)| *k == name).map(|(_, v)| *v);
                out.push_str(given.unwrap_or(default));
                rest = &rest[end + 1..];
            }
            out.push_str(rest);
            Value::String(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(|v| interpolate(v, env)).collect()),
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, v)| (k.clone(), interpolate(v, env)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Checks that the (interpolated) services create the topics of, feed and
/// run one shipped topology; returns its name.
fn run_topology(services: &Value) -> &'static str {
    let weir = &services["weir"];
    let command = strings(&weir["command"]);
    assert_eq!(command[0], "run");
    let topology = weir::topologies::find(&command[1])
        .unwrap_or_else(|| panic!("compose runs unknown topology {}", command[1]));
    let generator = strings(&services["generator"]["command"]);
    assert_eq!(&generator[..2], ["generate", topology.name]);
    let rate = generator.iter().skip_while(|a| *a != "--rate").nth(1);
    assert!(
        rate.and_then(|r| r.parse::<u64>().ok()).is_some(),
        "generator rate {rate:?}"
    );
    assert_eq!(
        services["generator"]["environment"]["WEIR_BOOTSTRAP_SERVERS"],
        weir["environment"]["WEIR_BOOTSTRAP_SERVERS"]
    );
    // `weir generate --count 0` creates the topology's input and output topics.
    let topics = strings(&services["topics"]["command"]);
    assert_eq!(&topics[..4], ["generate", topology.name, "--count", "0"]);
    assert_eq!(
        services["topics"]["environment"]["WEIR_BOOTSTRAP_SERVERS"],
        weir["environment"]["WEIR_BOOTSTRAP_SERVERS"]
    );
    topology.name
}

#[test]
fn the_compose_stack_is_consistent() {
    let compose = yaml(&root().join("docker-compose.yml"));
    let services = compose["services"].as_object().expect("services");
    for name in [
        "kafka",
        "topics",
        "generator",
        "weir",
        "prometheus",
        "grafana",
    ] {
        assert!(services.contains_key(name), "service {name} missing");
    }

    // Kafka: KRaft, transactions on one node.
    let kafka = &services["kafka"]["environment"];
    assert!(
        kafka["KAFKA_PROCESS_ROLES"]
            .as_str()
            .unwrap()
            .contains("controller")
    );
    assert_eq!(kafka["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"], "1");
    assert_eq!(kafka["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"], "1");
    // KIP-848 groups: the same broker-side session timing as the local
    // broker of scripts/kafka (the tests' broker).
    let local = std::fs::read_to_string(root().join("scripts/kafka")).unwrap();
    for key in [
        "group.consumer.session.timeout.ms",
        "group.consumer.min.session.timeout.ms",
        "group.consumer.heartbeat.interval.ms",
        "group.consumer.min.heartbeat.interval.ms",
    ] {
        let value = local
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("scripts/kafka sets {key}"));
        let env = format!("KAFKA_{}", key.replace('.', "_").to_uppercase());
        assert_eq!(kafka[&env], value, "{env} matches scripts/kafka");
    }

    // The services run word-count, or the topology WEIR_TOPOLOGY names.
    let weir = &services["weir"];
    assert_eq!(weir["deploy"]["replicas"], 3);
    assert_eq!(weir["build"], ".");
    assert!(root().join("Dockerfile").exists());
    for (topology, env) in [
        ("word-count", vec![]),
        (
            "datacenter-monitor",
            vec![("WEIR_TOPOLOGY", "datacenter-monitor")],
        ),
    ] {
        let services = interpolate(&compose["services"], &env);
        assert_eq!(run_topology(&services), topology, "under {env:?}");
    }

    // Every host path mounted into a container exists.
    for (name, service) in services {
        for volume in strings(&service["volumes"]) {
            let host = volume.split(':').next().unwrap();
            if host.starts_with("./") {
                assert!(
                    root().join(host).exists(),
                    "service {name} mounts missing {host}"
                );
            }
        }
    }

    // The Dockerfile copies what the build needs and listens where Prometheus scrapes.
    let dockerfile = std::fs::read_to_string(root().join("Dockerfile")).unwrap();
    for line in dockerfile
        .lines()
        .filter(|l| l.starts_with("COPY ") && !l.contains("--from"))
    {
        let words: Vec<&str> = line.split_whitespace().collect();
        for source in &words[1..words.len() - 1] {
            assert!(
                root().join(source).exists(),
                "Dockerfile copies missing {source}"
            );
        }
    }
    assert!(dockerfile.contains("--bin weir"));
    let port = image_http_port(&dockerfile);
    assert!(strings(&weir["expose"]).contains(&port.to_string()));
    let prometheus_mount = strings(&services["prometheus"]["volumes"])
        .into_iter()
        .find(|v| v.contains("prometheus.yml"))
        .expect("prometheus config mounted");
    let prometheus = yaml(&root().join(prometheus_mount.split(':').next().unwrap()));
    let sd = &prometheus["scrape_configs"][0]["dns_sd_configs"][0];
    assert_eq!(strings(&sd["names"]), ["weir"]);
    assert_eq!(sd["port"], port);

    // Grafana loads dashboards/ from where compose mounts it, with the datasource uid they use.
    let grafana_volumes = strings(&services["grafana"]["volumes"]);
    let dashboards_target = grafana_volumes
        .iter()
        .find_map(|v| v.strip_prefix("./dashboards:"))
        .map(|t| t.trim_end_matches(":ro"))
        .expect("dashboards/ mounted into grafana");
    let provisioning = grafana_volumes
        .iter()
        .find_map(|v| v.strip_suffix(":/etc/grafana/provisioning:ro"))
        .expect("provisioning mounted");
    let provider = yaml(&root().join(provisioning).join("dashboards/weir.yml"));
    assert_eq!(
        provider["providers"][0]["options"]["path"],
        dashboards_target
    );
    let datasource = yaml(&root().join(provisioning).join("datasources/prometheus.yml"));
    let uid = datasource["datasources"][0]["uid"].as_str().unwrap();
    for entry in std::fs::read_dir(root().join("dashboards")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let dashboard: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        for panel in dashboard["panels"].as_array().unwrap() {
            assert_eq!(
                panel["datasource"]["uid"],
                uid,
                "{}: panel {} uses another datasource",
                path.display(),
                panel["title"]
            );
        }
    }
}

/// Runs `deploy/compose-config` (compose-go) on `file`; `None` without Go.
fn compose_config(file: &Path) -> Option<std::process::Output> {
    if Command::new("go").arg("version").output().is_err() {
        return None;
    }
    let output = Command::new("go")
        .args(["run", "."])
        .arg(file)
        .current_dir(root().join("deploy/compose-config"))
        .output()
        .expect("running go run");
    Some(output)
}

#[test]
fn compose_go_accepts_the_compose_file_and_rejects_a_broken_one() {
    let Some(output) = compose_config(&root().join("docker-compose.yml")) else {
        println!(
            "Go is not installed: compose-go check not run (docker compose config equivalent)"
        );
        return;
    };
    assert!(
        output.status.success(),
        "compose-go rejects docker-compose.yml: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let normalized = String::from_utf8_lossy(&output.stdout);
    for service in ["kafka", "generator", "prometheus", "grafana"] {
        assert!(
            normalized.contains(&format!("\n  {service}:\n")),
            "normalized config lists service {service}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("docker-compose.yml");
    std::fs::write(
        &broken,
        "services:\n  weir:\n    image: weir\n    replicas_typo: 3\n",
    )
    .unwrap();
    let output = compose_config(&broken).unwrap();
    assert!(
        !output.status.success(),
        "an unknown service key is rejected"
    );
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("replicas_typo"),
        "the error names the key: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}
