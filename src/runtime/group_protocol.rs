//! Choosing the consumer group protocol when `group_protocol = auto`: the
//! KIP-848 `consumer` protocol when the broker offers it, else `classic`.
//!
//! Consumer settings only the classic protocol takes (`session.timeout.ms`,
//! …) given in the configuration make `auto` choose `classic`.
//!
//! A broker offers it when its `group.coordinator.rebalance.protocols`
//! lists `consumer` (the default from Kafka 4.0 on; brokers before 3.7 do
//! not have the setting). The setting is read with `DescribeConfigs` on one
//! broker, through the admin client and its security settings. A broker
//! that cannot be asked (no `DescribeConfigs` permission, say) gets
//! `classic`, with a warning that says how to choose explicitly.

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::Consumer;

use crate::config::{GroupProtocol, StreamsConfig};

/// The broker setting that lists the group protocols it serves.
const PROTOCOLS_KEY: &str = "group.coordinator.rebalance.protocols";

/// The protocol the stream threads use: `asked` unless it is `Auto`, then
/// what the broker offers. Logs the choice and why.
pub(crate) async fn resolve(
    config: &StreamsConfig,
    admin: &AdminClient<DefaultClientContext>,
    metadata: &super::clients::MetadataClient,
) -> GroupProtocol {
    let asked = config.group_protocol;
    if asked != GroupProtocol::Auto {
        tracing::info!(group_protocol = %asked, "consumer group protocol (configured)");
        return asked;
    }
    if let Some(key) = config.classic_only_consumer_key() {
        tracing::info!(
            group_protocol = "classic",
            "consumer group protocol (auto): {key} is set, which only the classic protocol takes"
        );
        return GroupProtocol::Classic;
    }
    match offered(admin, metadata).await {
        Ok(Some(protocols)) => {
            let chosen = choose(&protocols);
            tracing::info!(group_protocol = %chosen, broker_offers = %protocols, "consumer group protocol (auto)");
            chosen
        }
        Ok(None) => {
            tracing::info!(
                group_protocol = "classic",
                "consumer group protocol (auto): the broker has no {PROTOCOLS_KEY} (older than 3.7)"
            );
            GroupProtocol::Classic
        }
        Err(reason) => {
            tracing::warn!(
                group_protocol = "classic",
                %reason,
                "consumer group protocol (auto): could not read the broker's {PROTOCOLS_KEY}; \
                 set group_protocol = consumer to use KIP-848 on a Kafka 4.0+ broker"
            );
            GroupProtocol::Classic
        }
    }
}

/// `consumer` when the broker's protocol list names it.
fn choose(protocols: &str) -> GroupProtocol {
    if protocols
        .split(',')
        .any(|p| p.trim().eq_ignore_ascii_case("consumer"))
    {
        GroupProtocol::Consumer
    } else {
        GroupProtocol::Classic
    }
}

/// The value of [`PROTOCOLS_KEY`] on the first broker that answers (one
/// may be down: a cluster lists a killed broker until its session
/// expires); `None` when it has none.
async fn offered(
    admin: &AdminClient<DefaultClientContext>,
    metadata: &super::clients::MetadataClient,
) -> Result<Option<String>, String> {
    let cluster = metadata
        .fetch_metadata(None, Duration::from_secs(10))
        .map_err(|e| format!("reading the cluster metadata: {e}"))?;
    let mut reasons = Vec::new();
    for broker in cluster.brokers().iter().map(|b| b.id()) {
        match broker_protocols(admin, broker).await {
            Ok(protocols) => return Ok(protocols),
            Err(reason) => reasons.push(reason),
        }
    }
    if reasons.is_empty() {
        return Err("the cluster metadata lists no broker".into());
    }
    Err(reasons.join("; "))
}

async fn broker_protocols(
    admin: &AdminClient<DefaultClientContext>,
    broker: i32,
) -> Result<Option<String>, String> {
    let opts = AdminOptions::new().request_timeout(Some(Duration::from_secs(10)));
    let results = admin
        .describe_configs([&ResourceSpecifier::Broker(broker)], &opts)
        .await
        .map_err(|e| format!("describing broker {broker}'s configuration: {e}"))?;
    let resource = results
        .into_iter()
        .next()
        .ok_or("no answer")?
        .map_err(|code| format!("describing broker {broker}'s configuration: {code}"))?;
    Ok(resource
        .entries
        .into_iter()
        .find(|e| e.name == PROTOCOLS_KEY)
        .and_then(|e| e.value))
}

#[cfg(test)]
mod tests {
    use super::{GroupProtocol, choose};

    #[test]
    fn consumer_is_chosen_only_when_the_broker_lists_it() {
        assert_eq!(choose("classic,consumer"), GroupProtocol::Consumer);
        assert_eq!(
            choose("classic, consumer ,streams"),
            GroupProtocol::Consumer
        );
        assert_eq!(choose("classic"), GroupProtocol::Classic);
        assert_eq!(choose(""), GroupProtocol::Classic);
    }
}
