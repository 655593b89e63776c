//! Consumer protocol metadata from members (subscriptions, assignments, sticky user data) never
//! panics the leader or the coordinator.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = gregor_assign::protocol::decode_subscription(data);
    let _ = gregor_assign::protocol::decode_assignment(data);
    let _ = gregor_assign::protocol::decode_sticky_user_data(data);
    let _ = gregor_assign::protocol::decode_cooperative_user_data(data);
});
