//! Request decoding never panics: any bytes are a request or a typed error.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = gregor_broker::frame::decode_request(bytes::Bytes::copy_from_slice(data));
});
