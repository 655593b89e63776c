//! The data-plane workloads of a replicated run side by side: the data topic's producers and
//! consumer, and, as the options ask, partition admin, a consumer group, side topics, ACLs and
//! client quotas.

use std::cell::RefCell;
use std::rc::Rc;

use crate::data;
use crate::group::GroupWorkload;
use crate::history::History;
use crate::options::SimOptions;

/// The whole data workload: topic, producers and consumer. Sets `done` when the consumer's
/// final pass has read every acknowledged record (or never, which the driver's bound reports).
pub async fn run(
    history: Rc<RefCell<History>>,
    options: SimOptions,
    nodes: usize,
) -> turmoil::Result {
    let seed = options.seed;
    let group = options.groups.then_some(GroupWorkload {
        stalls: options.stalls,
        static_members: options.static_members,
        consumer_protocol: options.consumer_protocol,
        mixed_protocols: options.mixed_protocols,
        load_assignor: options.load_assignor,
    });
    data::create_topic(&history, nodes).await;
    let producers = async {
        tokio::join!(
            data::produce(history.clone(), nodes, seed, true),
            data::produce(history.clone(), nodes, seed, false)
        );
        let mut h = history.borrow_mut();
        h.data.producers_done = true;
        h.event("producers done");
    };
    let admin_ops = async {
        if options.admin {
            crate::admin::run(history.clone(), nodes, seed).await;
        }
    };
    let group = async {
        if let Some(workload) = group {
            crate::group::run(history.clone(), nodes, seed, workload).await;
        }
    };
    let topic_ops = async {
        if options.topic_admin {
            crate::topics::run(history.clone(), nodes, seed).await;
        }
    };
    let acl_ops = async {
        if options.acls {
            crate::acls::run(history.clone(), nodes, seed).await;
        }
    };
    let quota_ops = async {
        if options.quotas {
            crate::quotas::run(history.clone(), nodes, seed).await;
        }
    };
    // ACLs and quotas share one slot: join! rotates which future it polls first, so a seventh
    // slot would change the interleaving, and with it the schedule, of every seed.
    let security_ops = async {
        tokio::join!(acl_ops, quota_ops);
    };
    let workloads = async {
        tokio::join!(
            producers,
            data::consume(history.clone(), nodes),
            admin_ops,
            group,
            topic_ops,
            security_ops
        );
    };
    // Outside the join above, whose order of polling every other run's schedule depends on.
    if options.transactions {
        tokio::join!(workloads, crate::txn::run(history.clone(), nodes, seed));
    } else {
        workloads.await;
    }
    let mut h = history.borrow_mut();
    // The driver's liveness check: the first `acks=all` acknowledgement after the faults.
    h.final_write = Some((0, h.data.first_ack_after_faults));
    h.done = true;
    Ok(())
}
