//! [`Topology::describe`]: the topology as text (Kafka Streams' format) and
//! as a Mermaid flowchart.
//!
//! The text lists, per sub-topology, each node with its topics or stores and
//! its successors (`-->`) and predecessors (`<--`), in creation order (which is
//! a topological order). Repartition points show as a sink to and a source from
//! a `…-repartition` topic (named without the application id, as in Kafka
//! Streams). The description is deterministic: equal builder code gives equal text.

use std::fmt::{self, Write as _};

use super::{NodeKind, TopicName, Topology};

/// What a described node is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeKindDescription {
    /// Reads topics.
    Source {
        /// The topics (repartition topics as `<name>-repartition`).
        topics: Vec<String>,
    },
    /// Processes records, using stores.
    Processor {
        /// The connected stores.
        stores: Vec<String>,
    },
    /// Writes a topic.
    Sink {
        /// The topic.
        topic: String,
        /// Whether it is an internal repartition topic.
        repartition: bool,
    },
}

/// One node of a description.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeDescription {
    /// The node's name.
    pub name: String,
    /// What it is.
    pub kind: NodeKindDescription,
    /// Names of the nodes it forwards to.
    pub successors: Vec<String>,
    /// Names of the nodes forwarding to it.
    pub predecessors: Vec<String>,
}

/// One sub-topology of a description.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubtopologyDescription {
    /// The sub-topology id (the first part of its task ids).
    pub id: u32,
    /// Its nodes in creation order.
    pub nodes: Vec<NodeDescription>,
}

/// The structure of a topology. `Display` gives Kafka Streams' text format;
/// [`TopologyDescription::to_mermaid`] a Mermaid flowchart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopologyDescription {
    /// The sub-topologies in id order.
    pub subtopologies: Vec<SubtopologyDescription>,
    /// Global tables as `(store, topic)`: every instance loads them; they
    /// have no tasks. Listed after the sub-topologies (only when present).
    pub global_stores: Vec<(String, String)>,
}

impl Topology {
    /// Describes the topology; see [`TopologyDescription`].
    ///
    /// ```
    /// use weir::topology::{Consumed, Produced, StreamsBuilder};
    /// let b = StreamsBuilder::new();
    /// b.stream::<String, String>("in", Consumed::new()).to("out", Produced::new());
    /// let text = b.build().unwrap().describe().to_string();
    /// assert!(text.starts_with("Topologies:\n   Sub-topology: 0\n"));
    /// assert!(text.contains("Source: KSTREAM-SOURCE-0000000000 (topics: [in])"));
    /// ```
    pub fn describe(&self) -> TopologyDescription {
        let names = |ids: &[usize]| {
            ids.iter()
                .map(|&i| self.nodes[i].name.clone())
                .collect::<Vec<_>>()
        };
        let subtopologies = self
            .subtopologies
            .iter()
            .enumerate()
            .map(|(id, sub)| SubtopologyDescription {
                id: id as u32,
                nodes: sub
                    .nodes
                    .iter()
                    .map(|&n| {
                        let node = &self.nodes[n];
                        let kind = match &node.kind {
                            NodeKind::Source { topics } => NodeKindDescription::Source {
                                topics: topics.iter().map(|t| t.name().to_owned()).collect(),
                            },
                            NodeKind::Processor => NodeKindDescription::Processor {
                                stores: node
                                    .stores
                                    .iter()
                                    .map(|&s| self.stores[s].name.clone())
                                    .collect(),
                            },
                            NodeKind::Sink { topic } => NodeKindDescription::Sink {
                                topic: topic.name().to_owned(),
                                repartition: matches!(topic, TopicName::Repartition(_)),
                            },
                        };
                        NodeDescription {
                            name: node.name.clone(),
                            kind,
                            successors: names(&node.children),
                            predecessors: names(&node.parents),
                        }
                    })
                    .collect(),
            })
            .collect();
        TopologyDescription {
            subtopologies,
            global_stores: self.global_topics(),
        }
    }
}

fn list(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}

impl fmt::Display for TopologyDescription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "Topologies:")?;
        for sub in &self.subtopologies {
            writeln!(f, "   Sub-topology: {}", sub.id)?;
            for n in &sub.nodes {
                match &n.kind {
                    NodeKindDescription::Source { topics } => {
                        writeln!(
                            f,
                            "    Source: {} (topics: [{}])",
                            n.name,
                            topics.join(", ")
                        )?;
                        writeln!(f, "      --> {}", list(&n.successors))?;
                    }
                    NodeKindDescription::Processor { stores } => {
                        writeln!(
                            f,
                            "    Processor: {} (stores: [{}])",
                            n.name,
                            stores.join(", ")
                        )?;
                        writeln!(f, "      --> {}", list(&n.successors))?;
                        writeln!(f, "      <-- {}", list(&n.predecessors))?;
                    }
                    NodeKindDescription::Sink { topic, .. } => {
                        writeln!(f, "    Sink: {} (topic: {})", n.name, topic)?;
                        writeln!(f, "      <-- {}", list(&n.predecessors))?;
                    }
                }
            }
            writeln!(f)?;
        }
        for (store, topic) in &self.global_stores {
            writeln!(
                f,
                "   Global store: {store} (topic: {topic}; loaded in full by every instance, no tasks)"
            )?;
        }
        Ok(())
    }
}

/// Quotes text for a Mermaid label.
fn label(text: &str) -> String {
    text.replace('"', "#quot;")
}

impl TopologyDescription {
    /// The description as JSON: `{"subtopologies": [{"id", "nodes": [{"name",
    /// "kind" (source, processor, sink), "topics", "stores", "successors"}]}],
    /// "global_stores": [{"store", "topic"}]}` (the live page draws it).
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::json;
        let node = |n: &NodeDescription| {
            let (kind, topics, stores) = match &n.kind {
                NodeKindDescription::Source { topics } => ("source", topics.clone(), vec![]),
                NodeKindDescription::Processor { stores } => ("processor", vec![], stores.clone()),
                NodeKindDescription::Sink { topic, .. } => ("sink", vec![topic.clone()], vec![]),
            };
            json!({
                "name": n.name,
                "kind": kind,
                "topics": topics,
                "stores": stores,
                "successors": n.successors,
            })
        };
        json!({
            "subtopologies": self.subtopologies.iter().map(|s| json!({
                "id": s.id,
                "nodes": s.nodes.iter().map(node).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "global_stores": self.global_stores.iter().map(|(store, topic)| json!({
                "store": store,
                "topic": topic,
            })).collect::<Vec<_>>(),
        })
    }

    /// A Mermaid `flowchart`: one `subgraph` per sub-topology, nodes `nI`,
    /// topics `tI` (parallelograms) outside, stores `sI` (cylinders) dotted to
    /// their processors. Repartition topics connect the sub-topologies.
    pub fn to_mermaid(&self) -> String {
        let mut out = String::from("flowchart TB\n");
        let mut topics: Vec<String> = Vec::new();
        let mut stores: Vec<String> = Vec::new();
        let mut node_ids: Vec<&str> = Vec::new();
        let mut edges = String::new();
        let id_of = |ids: &mut Vec<String>, name: &str| -> usize {
            match ids.iter().position(|n| n == name) {
                Some(i) => i,
                None => {
                    ids.push(name.to_owned());
                    ids.len() - 1
                }
            }
        };
        for sub in &self.subtopologies {
            for n in &sub.nodes {
                node_ids.push(&n.name);
            }
        }
        let node_id = |name: &str| {
            node_ids
                .iter()
                .position(|n| *n == name)
                .unwrap_or(usize::MAX)
        };
        for sub in &self.subtopologies {
            let _ = writeln!(out, "  subgraph sub{0}[\"Sub-topology {0}\"]", sub.id);
            for n in &sub.nodes {
                let id = node_id(&n.name);
                let kind = match &n.kind {
                    NodeKindDescription::Source { topics: ts } => {
                        for t in ts {
                            let t = id_of(&mut topics, t);
                            let _ = writeln!(edges, "  t{t} --> n{id}");
                        }
                        "Source"
                    }
                    NodeKindDescription::Processor { stores: ss } => {
                        for s in ss {
                            let s = id_of(&mut stores, s);
                            let _ = writeln!(edges, "  n{id} -.- s{s}");
                        }
                        "Processor"
                    }
                    NodeKindDescription::Sink { topic, .. } => {
                        let t = id_of(&mut topics, topic);
                        let _ = writeln!(edges, "  n{id} --> t{t}");
                        "Sink"
                    }
                };
                let _ = writeln!(out, "    n{id}[\"{kind}: {}\"]", label(&n.name));
                for s in &n.successors {
                    let _ = writeln!(edges, "  n{id} --> n{}", node_id(s));
                }
            }
            out.push_str("  end\n");
        }
        for (i, t) in topics.iter().enumerate() {
            let _ = writeln!(out, "  t{i}[/\"{}\"/]", label(t));
        }
        for (i, s) in stores.iter().enumerate() {
            let _ = writeln!(out, "  s{i}[(\"{}\")]", label(s));
        }
        out.push_str(&edges);
        out
    }
}

impl std::fmt::Debug for Topology {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.describe())
    }
}
