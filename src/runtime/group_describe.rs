//! Describing the consumer group: each member's client id and assignment,
//! under either group protocol, and the application's instances they make
//! up (standby placement and query routing read both).
//!
//! The classic `DescribeGroups` request (rdkafka's `fetch_group_list`)
//! lists no members of a group that runs KIP-848's `consumer` protocol;
//! such a group is described with `ConsumerGroupDescribe`. librdkafka's
//! `DescribeConsumerGroups` admin call asks with the new request and falls
//! back to the classic one for a classic group, but rdkafka does not wrap
//! it: this module calls it through `rdkafka::bindings`, as it reads a
//! consumer's member epoch ([`member_epoch`]), which rdkafka does not
//! expose either. These, the cached watermarks of `thread/lag.rs` and the
//! batched changelog reads of `changelog/kafka.rs` are the only uses of
//! librdkafka's C API in Weir.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::{CStr, CString, c_char};
use std::time::Duration;

use rdkafka::bindings as rd;
use rdkafka::client::{Client, ClientContext};

use crate::processor::TaskId;

/// The member epoch of `consumer` in its group (the generation under the
/// classic protocol): positive once it joined, 0 or -1 before.
pub(crate) fn member_epoch<C: ClientContext>(consumer: &Client<C>) -> i32 {
    // SAFETY: `native_ptr` is the live handle `consumer` owns. The group
    // metadata librdkafka returns is a copy owned by the caller, read
    // once and destroyed here; a null result (not a consumer) is checked.
    unsafe {
        let metadata = rd::rd_kafka_consumer_group_metadata(consumer.native_ptr());
        if metadata.is_null() {
            return -1;
        }
        let epoch = rd::rd_kafka_consumer_group_metadata_generation_id(metadata);
        rd::rd_kafka_consumer_group_metadata_destroy(metadata);
        epoch
    }
}

/// What a stream thread's `client.id` says (see
/// `clients::consumer_client_id`): the instance's process id and its
/// advertised endpoint. `None` for other clients.
pub(crate) fn parse_client_id<'a>(
    client_id: &'a str,
    application_id: &str,
) -> Option<(&'a str, Option<&'a str>)> {
    let (id, endpoint) = match client_id.split_once('@') {
        Some((id, endpoint)) => (id, Some(endpoint)),
        None => (client_id, None),
    };
    let rest = id
        .strip_prefix(application_id)?
        .strip_prefix('-')?
        .strip_suffix("-consumer")?;
    let (process, thread) = rest.rsplit_once('-')?;
    thread.parse::<usize>().ok()?;
    Some((process, endpoint))
}

/// One instance of the application, from its stream threads' members.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct GroupInstance {
    /// Its advertised endpoint, when its client ids carry one.
    pub(crate) endpoint: Option<String>,
    /// The tasks its stream threads own now.
    pub(crate) tasks: BTreeSet<TaskId>,
}

/// The group's members by instance (the process id in a stream thread's
/// `client.id`; other clients are left out): each one's endpoint and the
/// tasks its members own, a task being `(sub-topology, partition)` of an
/// assigned topic that `subtopology_of_topic` knows.
pub(crate) fn instances(
    members: Vec<GroupMember>,
    application_id: &str,
    subtopology_of_topic: &HashMap<String, u32>,
) -> BTreeMap<String, GroupInstance> {
    let mut instances: BTreeMap<String, GroupInstance> = BTreeMap::new();
    for member in members {
        let Some((process, endpoint)) = parse_client_id(&member.client_id, application_id) else {
            continue;
        };
        let instance = instances.entry(process.to_string()).or_default();
        if let Some(endpoint) = endpoint {
            instance.endpoint = Some(endpoint.to_string());
        }
        for (topic, partition) in member.assignment {
            if let Some(&subtopology) = subtopology_of_topic.get(&topic) {
                instance.tasks.insert(TaskId {
                    subtopology,
                    partition,
                });
            }
        }
    }
    instances
}

/// One member of a consumer group (public as
/// [`crate::testing::GroupMember`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMember {
    /// The member's `client.id`.
    pub client_id: String,
    /// The partitions the member owns now, as (topic, partition).
    pub assignment: Vec<(String, i32)>,
}

/// Frees what librdkafka allocated for one call, however it ends.
struct Call {
    queue: *mut rd::rd_kafka_queue_t,
    options: *mut rd::rd_kafka_AdminOptions_t,
    event: *mut rd::rd_kafka_event_t,
}

impl Drop for Call {
    fn drop(&mut self) {
        // SAFETY: each pointer is null or was returned by the matching
        // librdkafka constructor and is destroyed exactly once, here.
        unsafe {
            if !self.event.is_null() {
                rd::rd_kafka_event_destroy(self.event);
            }
            if !self.options.is_null() {
                rd::rd_kafka_AdminOptions_destroy(self.options);
            }
            if !self.queue.is_null() {
                rd::rd_kafka_queue_destroy(self.queue);
            }
        }
    }
}

/// A C string owned by librdkafka, copied; empty when null.
///
/// # Safety
/// `s` is null or a NUL-terminated string valid for the call.
unsafe fn text(s: *const c_char) -> String {
    if s.is_null() {
        return String::new();
    }
    // SAFETY: non-null and NUL-terminated by the caller's contract.
    unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
}

/// The members of `group` and their assignments, asked through `client`
/// (any librdkafka client handle of the application: admin requests go to
/// the group's coordinator). An unknown or empty group has no members.
pub(crate) fn describe_group<C: ClientContext>(
    client: &Client<C>,
    group: &str,
    timeout: Duration,
) -> Result<Vec<GroupMember>, String> {
    let group_c = CString::new(group).map_err(|_| "the group id contains NUL".to_string())?;
    let rk = client.native_ptr();
    let timeout_ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: `rk` is the live client handle `client` owns for the whole
    // call. The options and queue are created here, handed to librdkafka
    // and freed by `Call` after the result event was read. The group name
    // array and its string outlive the call (librdkafka copies them).
    // Every pointer read from the result is owned by the event and used
    // only before `Call` destroys it; strings are copied out.
    unsafe {
        let mut call = Call {
            queue: rd::rd_kafka_queue_new(rk),
            options: rd::rd_kafka_AdminOptions_new(
                rk,
                rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBECONSUMERGROUPS,
            ),
            event: std::ptr::null_mut(),
        };
        if call.queue.is_null() || call.options.is_null() {
            return Err("librdkafka could not set up the DescribeConsumerGroups call".into());
        }
        let mut errstr = [0 as c_char; 256];
        rd::rd_kafka_AdminOptions_set_request_timeout(
            call.options,
            timeout_ms,
            errstr.as_mut_ptr(),
            errstr.len(),
        );
        let mut groups = [group_c.as_ptr()];
        rd::rd_kafka_DescribeConsumerGroups(rk, groups.as_mut_ptr(), 1, call.options, call.queue);
        // A little longer than the request's own timeout, which answers
        // with an error event when it runs out.
        call.event = rd::rd_kafka_queue_poll(call.queue, timeout_ms.saturating_add(1000));
        if call.event.is_null() {
            return Err(format!(
                "no answer to DescribeConsumerGroups within {timeout:?}"
            ));
        }
        if rd::rd_kafka_event_error(call.event)
            != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
        {
            return Err(format!(
                "DescribeConsumerGroups failed: {}",
                text(rd::rd_kafka_event_error_string(call.event))
            ));
        }
        let result = rd::rd_kafka_event_DescribeConsumerGroups_result(call.event);
        if result.is_null() {
            return Err("DescribeConsumerGroups answered with another event".into());
        }
        let mut count = 0usize;
        let descriptions = rd::rd_kafka_DescribeConsumerGroups_result_groups(result, &mut count);
        let mut members = Vec::new();
        for g in 0..count {
            let description = *descriptions.add(g);
            let error = rd::rd_kafka_ConsumerGroupDescription_error(description);
            if !error.is_null() {
                let code = rd::rd_kafka_error_code(error);
                if code == rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_GROUP_ID_NOT_FOUND {
                    continue;
                }
                return Err(format!(
                    "describing group {group}: {}",
                    text(rd::rd_kafka_error_string(error))
                ));
            }
            for m in 0..rd::rd_kafka_ConsumerGroupDescription_member_count(description) {
                let member = rd::rd_kafka_ConsumerGroupDescription_member(description, m);
                let mut assignment = Vec::new();
                let assigned = rd::rd_kafka_MemberDescription_assignment(member);
                let list = if assigned.is_null() {
                    std::ptr::null()
                } else {
                    rd::rd_kafka_MemberAssignment_partitions(assigned)
                };
                if !list.is_null() {
                    for i in 0..(*list).cnt.max(0) as usize {
                        let element = &*(*list).elems.add(i);
                        assignment.push((text(element.topic), element.partition));
                    }
                }
                members.push(GroupMember {
                    client_id: text(rd::rd_kafka_MemberDescription_client_id(member)),
                    assignment,
                });
            }
        }
        Ok(members)
    }
}

#[cfg(test)]
mod tests {
    use super::parse_client_id;

    fn process_of(client_id: &str, application_id: &str) -> Option<String> {
        parse_client_id(client_id, application_id).map(|(process, _)| process.to_string())
    }

    #[test]
    fn process_ids_come_from_client_ids() {
        assert_eq!(
            process_of("wc-1a2b-c3-0-consumer", "wc").as_deref(),
            Some("1a2b-c3")
        );
        assert_eq!(process_of("other-1a2b-0-consumer", "wc"), None);
        assert_eq!(process_of("wc-1a2b-x-consumer", "wc"), None);
        assert_eq!(
            process_of("wc-1a2b-0-consumer@10.0.0.7:9190", "wc").as_deref(),
            Some("1a2b"),
            "an advertised endpoint follows the id"
        );
    }
}
