//! Conversions between the wire's strings and error codes and gregor-group's types, shared by
//! the request families below `group_wire`.

use gregor_group::api as g;
use kafka_protocol::messages::GroupId;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

pub(super) fn string(s: &StrBytes) -> String {
    s.as_str().to_string()
}

pub(super) fn opt_string(s: &Option<StrBytes>) -> Option<String> {
    s.as_ref().map(string)
}

pub(super) fn str_bytes(s: String) -> StrBytes {
    StrBytes::from_string(s)
}

pub(super) fn opt_str_bytes(s: Option<String>) -> Option<StrBytes> {
    s.map(StrBytes::from_string)
}

pub(super) fn group_id(s: String) -> GroupId {
    GroupId(StrBytes::from_string(s))
}

pub(super) fn code(error: Option<ResponseError>) -> i16 {
    g::error_code(error)
}
