//! Any bytes: audit verification never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = gatehouse_proxy::audit::verify_bytes(data);
});
